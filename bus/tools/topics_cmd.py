"""`bus topics`: create, alter, list, describe and delete topics, like kafka-topics.sh.

Flags, checks and output follow Kafka's TopicCommand: `--topic` is a regular expression (whole-name
match, `,` meaning "or") for everything but `--create`; describe prints the tab-separated
`Topic: ...` summary line and one `\tTopic: ... Partition: ...` line per partition; errors print
`Error while executing topic command : ...` and exit 1. As an extension kept from the ZooKeeper-era
tool, `--alter` also takes `--config k=v` / `--delete-config k` (Kafka 4 sends you to kafka-configs).
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import TYPE_CHECKING

from bus.tools._common import ToolError, add_connection_args, admin_client, one_action, run_guarded

if TYPE_CHECKING:
    from bus.client.admin import AdminClient, ConfigEntry, PartitionInfo, TopicDescription

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
ACTIONS = ("create", "list", "alter", "describe", "delete")
REPORT_OPTIONS = ("under_replicated_partitions", "unavailable_partitions", "under_min_isr_partitions",
                  "at_min_isr_partitions")


def add_parser(sub: argparse._SubParsersAction, name: str) -> None:
    p = sub.add_parser(name, help="Create, delete, describe, or change a topic (kafka-topics).",
                       description="This tool helps to create, delete, describe, or change a topic.")
    add_connection_args(p)
    actions = p.add_argument_group("actions (exactly one)")
    actions.add_argument("--list", action="store_true", help="List all available topics.")
    actions.add_argument("--create", action="store_true", help="Create a new topic.")
    actions.add_argument("--delete", action="store_true", help="Delete a topic.")
    actions.add_argument("--alter", action="store_true",
                         help="Alter the number of partitions and replica assignment (and, as an extension, configs).")
    actions.add_argument("--describe", action="store_true", help="List details for the given topics.")
    p.add_argument("--topic", help="The topic to create, alter, describe or delete. It also accepts a regular "
                                   "expression, except for --create option.")
    p.add_argument("--topic-id", help="The topic-id to describe.")
    p.add_argument("--partitions", type=int, metavar="N",
                   help="The number of partitions for the topic being created or altered. If not supplied with "
                        "--create, the topic uses the cluster default.")
    p.add_argument("--replication-factor", type=int, metavar="N",
                   help="The replication factor for each partition in the topic being created. If not supplied, "
                        "the topic uses the cluster default.")
    p.add_argument("--replica-assignment", metavar="ASSIGNMENT",
                   help="A list of manual partition-to-broker assignments for the topic being created or altered: "
                        "broker_id_for_part1_replica1:broker_id_for_part1_replica2,"
                        "broker_id_for_part2_replica1:broker_id_for_part2_replica2,...")
    p.add_argument("--config", action="append", metavar="NAME=VALUE",
                   help="A topic configuration override for the topic being created (or altered); repeatable.")
    p.add_argument("--delete-config", action="append", metavar="NAME",
                   help="A topic configuration override to be removed for an existing topic (with --alter).")
    p.add_argument("--under-replicated-partitions", action="store_true",
                   help="If set when describing topics, only show under-replicated partitions.")
    p.add_argument("--unavailable-partitions", action="store_true",
                   help="If set when describing topics, only show partitions whose leader is not available.")
    p.add_argument("--under-min-isr-partitions", action="store_true",
                   help="If set when describing topics, only show partitions whose isr count is less than the "
                        "configured minimum.")
    p.add_argument("--at-min-isr-partitions", action="store_true",
                   help="If set when describing topics, only show partitions whose isr count is equal to the "
                        "configured minimum.")
    p.add_argument("--topics-with-overrides", action="store_true",
                   help="If set when describing topics, only show topics that have overridden configs.")
    p.add_argument("--if-exists", action="store_true",
                   help="If set when altering or deleting or describing topics, the action will only execute if "
                        "the topic exists.")
    p.add_argument("--if-not-exists", action="store_true",
                   help="If set when creating topics, the action will only execute if the topic does not "
                        "already exist.")
    p.add_argument("--exclude-internal", action="store_true",
                   help="Exclude internal topics when listing or describing topics. By default, the internal "
                        "topics are included.")
    p.set_defaults(run=run, parser=p)


# -- argument checks (TopicCommandOptions.checkArgs) ------------------------------------------------


def check_args(args: argparse.Namespace) -> str:
    """The action to run, after Kafka's consistency checks; raises ToolError with Kafka's wording."""
    action = one_action(args, ACTIONS, "--list, --describe, --create, --alter or --delete")
    if action not in ("list", "describe") and not args.topic:
        raise ToolError(f'Missing required argument "[topic]" for --{action}')
    if action == "alter" and args.partitions is None and not args.config and not args.delete_config:
        raise ToolError('Missing required argument "[partitions]" (or --config / --delete-config) for --alter')

    def only_with(option: str, allowed: tuple[str, ...]) -> None:
        if action not in allowed:
            flag = "--" + option.replace("_", "-")
            raise ToolError(f"Option \"[{flag[2:]}]\" can't be used with option \"[{action}]\"")

    if args.config:
        only_with("config", ("create", "alter"))
    if args.delete_config:
        only_with("delete_config", ("alter",))
    if args.partitions is not None:
        only_with("partitions", ("create", "alter"))
    if args.replication_factor is not None:
        only_with("replication_factor", ("create",))
    if args.replica_assignment is not None:
        only_with("replica_assignment", ("create", "alter"))
        if action == "create" and (args.partitions is not None or args.replication_factor is not None):
            raise ToolError('Option "[replica-assignment]" can\'t be used with option "[partitions]" or '
                            '"[replication-factor]"')
    for option in REPORT_OPTIONS:
        if getattr(args, option):
            only_with(option, ("describe",))
            if args.topics_with_overrides:
                raise ToolError(f'Option "[{option.replace("_", "-")}]" can\'t be used with option '
                                '"[topics-with-overrides]"')
    if args.topics_with_overrides:
        only_with("topics_with_overrides", ("describe",))
    if args.if_exists:
        only_with("if_exists", ("alter", "delete", "describe"))
    if args.if_not_exists:
        only_with("if_not_exists", ("create",))
    if args.exclude_internal:
        only_with("exclude_internal", ("list", "describe"))
    if args.topic_id:
        only_with("topic_id", ("describe",))
    return action


def parse_replica_assignment(text: str) -> dict[int, list[int]]:
    """`1:2,3:4` -> {0: [1, 2], 1: [3, 4]}, refusing duplicates and uneven replication factors as Kafka does."""
    out: dict[int, list[int]] = {}
    for index, part in enumerate(text.split(",")):
        try:
            brokers = [int(b.strip()) for b in part.split(":")]
        except ValueError:
            raise ToolError(f"Invalid replica assignment '{text}': broker ids must be integers") from None
        duplicates = sorted({b for b in brokers if brokers.count(b) > 1})
        if duplicates:
            raise ToolError("Partition replica lists may not contain duplicate entries: "
                            + ",".join(map(str, duplicates)))
        out[index] = brokers
        if len(brokers) != len(out[0]):
            raise ToolError(f"Partition {index} has different replication factor: {brokers}")
    return out


def parse_topic_configs(items: list[str] | None) -> dict[str, str]:
    configs: dict[str, str] = {}
    for item in items or ():
        pieces = re.split(r"\s*=\s*", item)
        if len(pieces) != 2:
            raise ToolError('requirement failed: Invalid topic config: all configs to be added must be in the '
                            'format "key=val".')
        configs[pieces[0].strip()] = pieces[1].strip()
    return configs


def topic_filter(pattern: str | None, exclude_internal: bool) -> re.Pattern[str] | None:
    """Kafka's IncludeList: commas mean "or", quotes and spaces are dropped, the whole name must match."""
    if pattern is None:
        return None
    cleaned = pattern.strip().replace(",", "|").replace(" ", "")
    cleaned = re.sub(r"^[\"']+", "", re.sub(r"[\"']+$", "", cleaned))
    try:
        return re.compile(cleaned)
    except re.error as exc:
        raise ToolError(f"Invalid topic regular expression '{pattern}': {exc}") from None


def select_topics(all_topics: list[str], pattern: str | None, exclude_internal: bool) -> list[str]:
    regex = topic_filter(pattern, exclude_internal)
    return [t for t in sorted(all_topics)
            if (regex is None or regex.fullmatch(t)) and not (exclude_internal and t in INTERNAL_TOPICS)]


# -- the command ------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    return run_guarded("topic", lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    action = check_args(args)
    configs = parse_topic_configs(args.config)
    assignment = parse_replica_assignment(args.replica_assignment) if args.replica_assignment else None
    if action == "create" and args.partitions is not None and args.partitions < 1:
        raise ToolError("The partitions must be greater than 0")
    if action == "create" and args.replication_factor is not None and not 1 <= args.replication_factor <= 32767:
        raise ToolError("The replication factor must be between 1 and 32767 inclusive")
    with admin_client(args) as admin:
        if action == "create":
            return _create(admin, args, configs, assignment)
        if action == "list":
            for name in _topics(admin, args):
                print(name)
            return 0
        if action == "alter":
            return _alter(admin, args, configs, assignment)
        if action == "describe":
            return _describe(admin, args)
        return _delete(admin, args)


def _topics(admin: AdminClient, args: argparse.Namespace) -> list[str]:
    return select_topics(admin.list_topics(include_internal=True), args.topic, args.exclude_internal)


def _ensure_exists(found: list[str], args: argparse.Namespace) -> None:
    if args.topic and not args.if_exists and not found:
        raise ToolError(f"Error while executing topic command : Topic '{args.topic}' does not exist as expected")


def _create(admin: AdminClient, args: argparse.Namespace, configs: dict[str, str],
            assignment: dict[int, list[int]] | None) -> int:
    from bus.client.admin import NewTopic, TopicAlreadyExistsError

    name = args.topic
    if "." in name or "_" in name:
        print("WARNING: Due to limitations in metric names, topics with a period ('.') or underscore ('_') could "
              "collide. To avoid issues it is best to use either, but not both.")
    topic = NewTopic(name, -1 if args.partitions is None else args.partitions,
                     -1 if args.replication_factor is None else args.replication_factor,
                     replica_assignment=assignment, configs=configs)
    try:
        admin.create_topics([topic])
    except TopicAlreadyExistsError:
        if args.if_not_exists:
            return 0
        raise
    print(f"Created topic {name}.")
    return 0


def _alter(admin: AdminClient, args: argparse.Namespace, configs: dict[str, str],
           assignment: dict[int, list[int]] | None) -> int:
    from bus.client.admin import AlterConfigOp, ConfigResource, ConfigResourceType, NewPartitions

    topics = _topics(admin, args)
    _ensure_exists(topics, args)
    if not topics:
        return 0
    if args.partitions is not None:
        described = admin.describe_topics(topics)
        plan: dict[str, NewPartitions] = {}
        for name in topics:
            new_assignment = None
            if assignment is not None:
                existing = len(described[name].partitions)
                new_assignment = [brokers for index, brokers in sorted(assignment.items()) if index >= existing]
            plan[name] = NewPartitions(args.partitions, new_assignment)
        admin.create_partitions(plan)
    if configs or args.delete_config:
        ops = [AlterConfigOp.delete(k.strip()) for k in args.delete_config or ()]
        ops += [AlterConfigOp.set(k, v) for k, v in configs.items()]
        admin.incremental_alter_configs({ConfigResource(ConfigResourceType.TOPIC, name): ops for name in topics})
        for name in topics:
            print(f"Completed updating config for topic {name}.")
    return 0


def _delete(admin: AdminClient, args: argparse.Namespace) -> int:
    topics = _topics(admin, args)
    _ensure_exists(topics, args)
    if topics:
        admin.delete_topics(topics)
    return 0


def _min_isr(config: dict[str, ConfigEntry]) -> int:
    entry = config.get("min.insync.replicas")
    try:
        return int(entry.value) if entry is not None and entry.value is not None else 1
    except ValueError:
        return 1


def _describe(admin: AdminClient, args: argparse.Namespace) -> int:
    from bus.client.admin import ConfigResource, ConfigResourceType

    if args.topic_id:
        topics = [d.name for d in admin.describe_topics(admin.list_topics(include_internal=True)).values()
                  if d.topic_id == args.topic_id and not (args.exclude_internal and d.is_internal)]
        if not topics and not args.if_exists:
            raise ToolError(f"Error while executing topic command : TopicId '{args.topic_id}' does not exist as "
                            "expected")
    else:
        topics = _topics(admin, args)
        _ensure_exists(topics, args)
    if not topics:
        return 0
    descriptions = admin.describe_topics(topics)
    configs = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, t) for t in topics])
    live = {b.node_id for b in admin.describe_cluster().brokers}
    reports = [getattr(args, o) for o in REPORT_OPTIONS]
    describe_configs = not any(reports)
    describe_partitions = not args.topics_with_overrides
    out = sys.stdout
    for name in topics:
        desc = descriptions[name]
        config = configs.get(ConfigResource(ConfigResourceType.TOPIC, name), {})
        overridden = [e for e in config.values() if not e.is_default]
        if describe_configs and desc.partitions and (not args.topics_with_overrides or overridden):
            out.write(format_topic_line(desc, overridden) + "\n")
        if describe_partitions:
            min_isr = _min_isr(config)
            for part in desc.partitions:
                if describe_configs or _report(args, part, live, min_isr):
                    out.write(format_partition_line(name, part) + "\n")
    return 0


def _report(args: argparse.Namespace, part: PartitionInfo, live: set[int], min_isr: int) -> bool:
    has_leader = part.leader is not None
    return bool(
        (args.under_replicated_partitions and len(part.replicas) - len(part.isr) > 0)
        or (args.unavailable_partitions and (not has_leader or part.leader not in live))
        or (args.under_min_isr_partitions and (not has_leader or len(part.isr) < min_isr))
        or (args.at_min_isr_partitions and len(part.isr) == min_isr))


def format_topic_line(desc: TopicDescription, overridden: list[ConfigEntry]) -> str:
    """`Topic: t\\tTopicId: id\\tPartitionCount: n\\tReplicationFactor: r\\tConfigs: k=v,...` as Kafka prints it."""
    line = f"Topic: {desc.name}"
    if desc.topic_id:
        line += f"\tTopicId: {desc.topic_id}"
    configs = ",".join(f"{e.name}={e.value}" for e in overridden)
    return line + f"\tPartitionCount: {len(desc.partitions)}\tReplicationFactor: {desc.replication_factor}" \
                  f"\tConfigs: {configs}"


def format_partition_line(topic: str, part: PartitionInfo) -> str:
    leader = "none" if part.leader is None else str(part.leader)
    return (f"\tTopic: {topic}\tPartition: {part.partition}\tLeader: {leader}"
            f"\tReplicas: {','.join(map(str, part.replicas))}\tIsr: {','.join(map(str, part.isr))}"
            "\tElr: N/A\tLastKnownElr: N/A")
