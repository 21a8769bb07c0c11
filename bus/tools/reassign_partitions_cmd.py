"""`bus reassign-partitions`: move partition replicas between brokers, like kafka-reassign-partitions.sh.

Flags, checks and output follow Kafka's ReassignPartitionsCommand. Exactly one action:
- `--generate --topics-to-move-json-file F --broker-list 1,2,3` prints the topics' "Current partition replica
  assignment" and a "Proposed partition reassignment configuration" over the listed brokers (the controller's own
  rack-unaware placement, `election.place_replicas`, from a random start as Kafka's AdminUtils); nothing changes;
- `--execute --reassignment-json-file F` prints the current assignment of those partitions "for rollback" and
  starts the moves (AlterPartitionReassignments); refused while other moves are under way unless `--additional`;
  with `--throttle N` it first throttles the copies to N bytes/s, as Kafka's tool: the topics'
  `leader.replication.throttled.replicas` (partition:broker for every current replica of a moving partition) and
  `follower.replication.throttled.replicas` (every replica being added), and `leader/follower.replication.
  throttled.rate` on every broker involved. Re-running it with `--additional` and another `--throttle` changes the
  rate of the moves under way;
- `--verify --reassignment-json-file F` prints, per partition, whether its move is completed or still in progress;
  once none of them is in progress it clears the throttles (the rates on every broker, the topics' throttled
  replica lists) unless `--preserve-throttles`;
- `--cancel --reassignment-json-file F` cancels the moves of those partitions still under way;
- `--list` prints every move under way.
Files use Kafka's format, `{"version":1,"partitions":[{"topic":..,"partition":..,"replicas":[..],
"log_dirs":["any",..]}]}` (`log_dirs` optional; a log dir other than "any" would move a replica between this
broker's directories, which is not supported). `--command-config` is a properties file for the admin client.
Bad flags or files exit 1 with one line saying why.

`--replica-alter-log-dirs-throttle` is accepted and throttles nothing, as in Kafka when no replica moves between
log dirs (the only kind here); `--disable-rack-aware` (placement is rack-unaware) and `--timeout` are accepted.
"""

from __future__ import annotations

import argparse
import json
import random
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from bus.config.broker import DYNAMIC_BROKER_KEYS
from bus.config.topic import THROTTLED_REPLICAS_KEYS
from bus.controller.election import place_replicas
from bus.protocol.topic_partition import TopicPartition
from bus.tools._common import ToolError, add_connection_args, admin_client, one_action, run_guarded

if TYPE_CHECKING:
    from bus.client.admin import AdminClient

ACTIONS = ("generate", "execute", "verify", "cancel", "list")
Assignment = dict[TopicPartition, list[int]]
BROKER_THROTTLES = DYNAMIC_BROKER_KEYS  # the leader and follower rates, then the log dirs one
LEADER_RATE, FOLLOWER_RATE = BROKER_THROTTLES[:2]
LEADER_REPLICAS, FOLLOWER_REPLICAS = THROTTLED_REPLICAS_KEYS
VERIFY_PERIODICALLY = ("Warning: You must run --verify periodically, until the reassignment completes, to ensure the "
                       "throttle is removed.")
EXISTING_MOVES = ("Cannot execute because there is an existing partition assignment.  Use --additional to override "
                  "this and create a new partition assignment in addition to the existing one. The --additional "
                  "flag can also be used to change the throttle by resubmitting the current reassignment.")


def add_parser(sub: argparse._SubParsersAction, name: str) -> None:
    p = sub.add_parser(name, help="Move partition replicas between brokers (kafka-reassign-partitions).",
                       description="This tool helps to move topic partitions between replicas.")
    add_connection_args(p, required=False)
    for action, text in (
            ("generate", "Generate a candidate partition reassignment configuration. Note that this only generates a "
                         "candidate assignment, it does not execute it."),
            ("execute", "Kick off the reassignment as specified by the --reassignment-json-file option."),
            ("verify", "Verify if the reassignment completed as specified by the --reassignment-json-file option."),
            ("cancel", "Cancel an active reassignment."),
            ("list", "List all active partition reassignments.")):
        p.add_argument(f"--{action}", action="store_true", help=text)
    p.add_argument("--reassignment-json-file", metavar="FILE",
                   help="The JSON file with the partition reassignment configuration (--execute, --verify, "
                        "--cancel).")
    p.add_argument("--topics-to-move-json-file", metavar="FILE",
                   help='Generate a reassignment configuration to move the partitions of the specified topics to '
                        'the list of brokers specified by --broker-list: {"topics": [{"topic": "foo"}], '
                        '"version": 1}')
    p.add_argument("--broker-list", metavar="BROKERLIST",
                   help='The list of brokers to which the partitions need to be reassigned in the form "0,1,2" '
                        "(with --generate).")
    p.add_argument("--additional", action="store_true",
                   help="Execute this reassignment in addition to any other ongoing ones.")
    p.add_argument("--disallow-replication-factor-change", action="store_true",
                   help="Refuse a reassignment that changes a partition's replication factor (--execute).")
    p.add_argument("--disable-rack-aware", action="store_true",
                   help="Disable rack aware replica assignment (placement here is always rack-unaware).")
    p.add_argument("--preserve-throttles", action="store_true",
                   help="Do not modify broker or topic throttles.")
    p.add_argument("--timeout", type=int, default=10_000, metavar="MS",
                   help="The maximum time in ms to wait for the reassignment to begin.")
    p.add_argument("--throttle", type=int, default=-1, metavar="BYTES_PER_S",
                   help="The movement of partitions between brokers will be throttled to this value (bytes/sec). "
                        "This option can be included with --execute when a reassignment is started, and it can be "
                        "altered by resubmitting the current reassignment along with the --additional flag. The "
                        "throttle rate should be at least 1 KB/s.")
    p.add_argument("--replica-alter-log-dirs-throttle", type=int, default=-1, metavar="BYTES_PER_S",
                   help="The movement of replicas between log directories on the same broker will be throttled to "
                        "this value (bytes/sec); moves between log directories are not supported here.")
    p.set_defaults(run=run, parser=p)


def run(args: argparse.Namespace) -> int:
    return run_guarded("reassign-partitions", lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    action = _validate(args)
    if action == "generate":
        topics = parse_topics_to_move(_read(args.topics_to_move_json_file, "--topics-to-move-json-file"))
        brokers = parse_broker_list(args.broker_list)
        with admin_client(args) as admin:
            return generate(admin, topics, brokers)
    if action == "list":
        with admin_client(args) as admin:
            return list_moves(admin)
    targets = parse_reassignment(_read(args.reassignment_json_file, "--reassignment-json-file"))
    with admin_client(args) as admin:
        if action == "execute":
            return execute(admin, targets, args.additional, not args.disallow_replication_factor_change,
                           args.throttle)
        if action == "verify":
            return verify(admin, targets, args.preserve_throttles)
        return cancel(admin, targets)


def _validate(args: argparse.Namespace) -> str:
    """The action, once the flags pass ReassignPartitionsCommand's checks."""
    action = one_action(args, ACTIONS, "--generate, --execute, --verify, --cancel, or --list")
    if not args.bootstrap_server:
        raise ToolError("Please specify --bootstrap-server")
    required = {"generate": ("topics_to_move_json_file", "broker_list"),
                "execute": ("reassignment_json_file",), "verify": ("reassignment_json_file",),
                "cancel": ("reassignment_json_file",), "list": ()}[action]
    missing = [_flag(dest) for dest in required if getattr(args, dest) is None]
    if missing:
        raise ToolError(f"Missing required argument(s) for --{action}: {', '.join(missing)}")
    allowed = {"generate": {"topics_to_move_json_file", "broker_list", "disable_rack_aware"},
               "execute": {"reassignment_json_file", "additional", "disallow_replication_factor_change",
                           "timeout", "throttle", "replica_alter_log_dirs_throttle"},
               "verify": {"reassignment_json_file", "preserve_throttles"},
               "cancel": {"reassignment_json_file", "preserve_throttles", "timeout"},
               "list": set()}[action]
    given = [dest for dest in ("reassignment_json_file", "topics_to_move_json_file", "broker_list")
             if getattr(args, dest) is not None]
    given += [dest for dest in ("additional", "disallow_replication_factor_change", "disable_rack_aware",
                                "preserve_throttles") if getattr(args, dest)]
    given += [dest for dest in ("throttle", "replica_alter_log_dirs_throttle") if getattr(args, dest) != -1]
    misplaced = [_flag(dest) for dest in given if dest not in allowed]
    if misplaced:
        raise ToolError(f"Option {misplaced[0]} can't be used with --{action}")
    return action


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def _read(path: str, flag: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ToolError(f"Cannot read {flag} {path}: {exc}") from None


def _json(text: str, what: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ToolError(f"{what} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ToolError(f"{what} must be a JSON object")
    version = data.get("version", 1)
    if version != 1:
        raise ToolError(f"{what}: Not supported version field value {version}")
    return data


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def parse_topics_to_move(text: str) -> list[str]:
    """The topics of Kafka's topics-to-move JSON (`{"topics": [{"topic": "foo"}], "version": 1}`), in order."""
    data = _json(text, "Topics to move data")
    entries = data.get("topics")
    if not isinstance(entries, list) or not entries:
        raise ToolError('Topics to move data: "topics" must be a non-empty list of {"topic": NAME} objects')
    topics = []
    for entry in entries:
        topic = entry.get("topic") if isinstance(entry, dict) else None
        if not isinstance(topic, str) or not topic:
            raise ToolError(f'Topics to move data: each entry needs a "topic" string, got {json.dumps(entry)}')
        topics.append(topic)
    duplicates = sorted(t for t, count in Counter(topics).items() if count > 1)
    if duplicates:
        raise ToolError(f"List of topics to reassign contains duplicate entries: {', '.join(duplicates)}")
    return topics


def parse_broker_list(text: str) -> list[int]:
    try:
        brokers = [int(b) for b in text.split(",")]
    except ValueError:
        raise ToolError(f"--broker-list must be broker ids separated by commas, e.g. 1,2,3: got {text!r}") from None
    duplicates = sorted(b for b, count in Counter(brokers).items() if count > 1)
    if duplicates:
        raise ToolError(f"Broker list contains duplicate entries: {', '.join(map(str, duplicates))}")
    return brokers


def parse_reassignment(text: str) -> Assignment:
    """Kafka's reassignment JSON: partition -> target replicas, in file order; malformed input is a ToolError
    (an empty list, an empty or repeated replica list, a partition named twice, log dirs other than "any")."""
    data = _json(text, "Partition reassignment data")
    entries = data.get("partitions")
    if not isinstance(entries, list):
        raise ToolError('Partition reassignment data: "partitions" must be a list')
    if not entries:
        raise ToolError("Partition reassignment list cannot be empty")
    targets: Assignment = {}
    duplicates: list[str] = []
    for entry in entries:
        if not isinstance(entry, dict):
            raise ToolError(f"Partition reassignment data: each entry must be an object, got {json.dumps(entry)}")
        topic, partition, replicas = entry.get("topic"), entry.get("partition"), entry.get("replicas")
        if (not isinstance(topic, str) or not isinstance(partition, int) or isinstance(partition, bool)
                or not isinstance(replicas, list) or not all(_int(r) for r in replicas)):
            raise ToolError('Partition reassignment data: each entry needs a "topic" string, a "partition" integer '
                            f'and a "replicas" list of broker ids, got {json.dumps(entry)}')
        tp = TopicPartition(topic, partition)
        if not replicas:
            raise ToolError("Partition replica list cannot be empty")
        log_dirs = entry.get("log_dirs", ["any"] * len(replicas))
        if not isinstance(log_dirs, list) or len(log_dirs) != len(replicas):
            raise ToolError(f"Size of replicas list {replicas} is different from size of log dirs list {log_dirs} "
                            f"for partition {tp}")
        if any(d != "any" for d in log_dirs):
            raise ToolError(f"Partition {tp}: moving replicas between log directories is not supported "
                            '(use "any" in log_dirs)')
        if tp in targets:
            duplicates.append(str(tp))
        targets[tp] = replicas
    if duplicates:
        raise ToolError(f"Partition reassignment contains duplicate topic partitions: {', '.join(duplicates)}")
    repeated = [f"{tp} contains multiple entries for {','.join(str(b) for b, n in Counter(r).items() if n > 1)}"
                for tp, r in targets.items() if len(set(r)) != len(r)]
    if repeated:
        raise ToolError(f"Partition replica lists may not contain duplicate entries: {'. '.join(repeated)}")
    return targets


def format_assignment(assignment: Mapping[TopicPartition, Sequence[int]]) -> str:
    """Kafka's reassignment JSON, compact and sorted by topic and partition, every log dir "any"."""
    partitions = [{"topic": tp.topic, "partition": tp.partition, "replicas": list(replicas),
                   "log_dirs": ["any"] * len(replicas)} for tp, replicas in sorted(assignment.items())]
    return json.dumps({"version": 1, "partitions": partitions}, separators=(",", ":"))


def _current(admin: AdminClient, partitions: Iterable[TopicPartition]) -> Assignment:
    """The replicas of `partitions` now; a partition that does not exist is a ToolError."""
    wanted = sorted(set(partitions))
    described = admin.describe_topics(tp.topic for tp in wanted)
    replicas = {TopicPartition(name, p.partition): list(p.replicas)
                for name, topic in described.items() for p in topic.partitions}
    unknown = [str(tp) for tp in wanted if tp not in replicas]
    if unknown:
        raise ToolError(f"Unable to find partition(s): {', '.join(unknown)}")
    return {tp: replicas[tp] for tp in wanted}


def propose(current: Mapping[TopicPartition, Sequence[int]], brokers: Sequence[int],
            rng: random.Random | None = None) -> Assignment:
    """New replicas for every partition of `current` over `brokers`, each topic keeping its replication factor
    (Kafka's calculateAssignment: a rack-unaware placement per topic from a random start)."""
    rng = rng or random.Random()
    ordered = sorted(brokers)
    proposed: Assignment = {}
    for topic in sorted({tp.topic for tp in current}):
        partitions = sorted(tp.partition for tp in current if tp.topic == topic)
        factor = len(current[TopicPartition(topic, partitions[0])])
        if factor > len(ordered):
            raise ToolError(f"Replication factor: {factor} larger than available brokers: {len(ordered)}.")
        placed = place_replicas(ordered, len(partitions), factor, rng.randrange(len(ordered)))
        proposed.update({TopicPartition(topic, p): placed[i] for i, p in enumerate(partitions)})
    return proposed


def generate(admin: AdminClient, topics: Sequence[str], brokers: Sequence[int]) -> int:
    known = {b.node_id for b in admin.describe_cluster().brokers}
    unknown = [b for b in brokers if b not in known]
    if unknown:
        raise ToolError(f"Broker(s) {', '.join(map(str, unknown))} in --broker-list are not in the cluster "
                        f"(brokers: {', '.join(map(str, sorted(known)))})")
    current = _current(admin, admin.partitions_for(topics))
    print(f"Current partition replica assignment\n{format_assignment(current)}\n")
    print(f"Proposed partition reassignment configuration\n{format_assignment(propose(current, brokers))}")
    return 0


def execute(admin: AdminClient, targets: Assignment, additional: bool, allow_replication_factor_change: bool,
            throttle: int = -1) -> int:
    moving = admin.list_partition_reassignments()
    if not additional and moving:
        raise ToolError(EXISTING_MOVES)
    known = {b.node_id for b in admin.describe_cluster().brokers}
    for broker in sorted({b for replicas in targets.values() for b in replicas}):
        if broker not in known:
            raise ToolError(f"Unknown broker id {broker}")
    current = _current(admin, targets)
    print(f"Current partition replica assignment\n\n{format_assignment(current)}\n\n"
          "Save this to use as the --reassignment-json-file option during rollback")
    if throttle >= 0:
        print(VERIFY_PERIODICALLY)
        set_throttles(admin, move_map(current, moving, targets), throttle)
        print(f"The inter-broker throttle limit was set to {throttle} B/s")
    results = admin.alter_partition_reassignments(targets,
                                                  allow_replication_factor_change=allow_replication_factor_change)
    _fail_on_errors("Error reassigning partition(s):", results)
    names = ",".join(str(tp) for tp in sorted(targets))
    print(f"Successfully started partition reassignment{'s' if len(targets) > 1 else ''} for {names}")
    return 0


def verify(admin: AdminClient, targets: Assignment, preserve_throttles: bool = False) -> int:
    moving = admin.list_partition_reassignments(targets)
    done = _current(admin, [tp for tp in targets if tp not in moving])
    print("Status of partition reassignment:")
    for tp in sorted(targets):
        if tp in moving:
            print(f"Reassignment of partition {tp} is still in progress.")
        elif done[tp] == targets[tp]:
            print(f"Reassignment of partition {tp} is completed.")
        else:
            print(f"There is no active reassignment of partition {tp}, but replica set is "
                  f"{','.join(map(str, done[tp]))} rather than {','.join(map(str, targets[tp]))}.")
    if not moving and not preserve_throttles:
        # Every broker, not only those of this file: an earlier --execute may have throttled others (Kafka's
        # clearAllThrottles does the same).
        clear_throttles(admin, {b.node_id for b in admin.describe_cluster().brokers}
                        | {b for replicas in targets.values() for b in replicas}, {tp.topic for tp in targets})
    return 0


def cancel(admin: AdminClient, targets: Assignment) -> int:
    moving = sorted(admin.list_partition_reassignments(targets))
    if not moving:
        print("None of the specified partition reassignments are active.")
        return 0
    results = admin.alter_partition_reassignments(dict.fromkeys(moving))
    _fail_on_errors(f"Error cancelling partition reassignment{'s' if len(moving) > 1 else ''} for:", results)
    print(f"Successfully cancelled partition reassignment{'s' if len(moving) > 1 else ''} for: "
          f"{','.join(str(tp) for tp in moving)}")
    return 0


def list_moves(admin: AdminClient) -> int:
    moving = admin.list_partition_reassignments()
    if not moving:
        print("No partition reassignments found.")
        return 0
    print("Current partition reassignments:")
    for tp, move in sorted(moving.items()):
        print(f"{tp}: replicas: {','.join(map(str, move.replicas))}. adding: "
              f"{','.join(map(str, move.adding_replicas))}. removing: {','.join(map(str, move.removing_replicas))}.")
    return 0


def move_map(current: Mapping[TopicPartition, Sequence[int]], moving: Mapping[TopicPartition, Any],
             targets: Mapping[TopicPartition, Sequence[int]]) -> dict[TopicPartition, tuple[list[int], list[int]]]:
    """Per partition, (sources, destinations): the replicas it has before its move (for a move under way, its
    replicas less those being added) and its target (Kafka's calculateProposedMoveMap)."""
    moves = {}
    for tp, target in targets.items():
        move = moving.get(tp)
        sources = ([r for r in move.replicas if r not in move.adding_replicas] if move is not None
                   else list(current[tp]))
        moves[tp] = (sources, list(target))
    return moves


def throttled_replicas(moves: Mapping[TopicPartition, tuple[list[int], list[int]]]) -> dict[str, tuple[str, str]]:
    """Per topic, its (leader, follower) throttled replica lists: every source replica of a moving partition may be
    the leader the copy comes from; every destination that is no source is a copy being made (Kafka's
    calculateLeaderThrottles / calculateFollowerThrottles)."""
    lists: dict[str, tuple[set[tuple[int, int]], set[tuple[int, int]]]] = {}
    for tp, (sources, destinations) in moves.items():
        leaders, followers = lists.setdefault(tp.topic, (set(), set()))
        leaders.update((tp.partition, b) for b in sources)
        followers.update((tp.partition, b) for b in destinations if b not in sources)
    return {topic: (",".join(f"{p}:{b}" for p, b in sorted(leaders)), ",".join(f"{p}:{b}" for p, b in
                                                                              sorted(followers)))
            for topic, (leaders, followers) in lists.items()}


def set_throttles(admin: AdminClient, moves: Mapping[TopicPartition, tuple[list[int], list[int]]],
                  rate: int) -> None:
    """Throttle the copies of `moves` to `rate` bytes/s (Kafka's modifyReassignmentThrottle)."""
    from bus.client.admin import AlterConfigOp, ConfigResource, ConfigResourceType

    topics = {ConfigResource(ConfigResourceType.TOPIC, topic): [AlterConfigOp.set(LEADER_REPLICAS, leaders),
                                                               AlterConfigOp.set(FOLLOWER_REPLICAS, followers)]
              for topic, (leaders, followers) in throttled_replicas(moves).items()}
    _alter_configs(admin, "topic throttles", topics)
    brokers = sorted({b for sources, destinations in moves.values() for b in (*sources, *destinations)})
    _alter_configs(admin, "broker throttles", {
        ConfigResource(ConfigResourceType.BROKER, str(b)): [AlterConfigOp.set(LEADER_RATE, str(rate)),
                                                            AlterConfigOp.set(FOLLOWER_RATE, str(rate))]
        for b in brokers})


def clear_throttles(admin: AdminClient, brokers: Iterable[int], topics: Iterable[str]) -> None:
    """Remove the throttle rates of `brokers` and the throttled replica lists of `topics` (Kafka's
    clearAllThrottles)."""
    from bus.client.admin import AlterConfigOp, ConfigResource, ConfigResourceType

    ids, names = sorted(set(brokers)), sorted(set(topics))
    print(f"Clearing broker-level throttles on broker{'s' if len(ids) > 1 else ''} {','.join(map(str, ids))}")
    _alter_configs(admin, "broker throttles", {
        ConfigResource(ConfigResourceType.BROKER, str(b)): [AlterConfigOp.delete(k) for k in BROKER_THROTTLES]
        for b in ids})
    print(f"Clearing topic-level throttles on topic{'s' if len(names) > 1 else ''} {','.join(names)}")
    _alter_configs(admin, "topic throttles", {
        ConfigResource(ConfigResourceType.TOPIC, t): [AlterConfigOp.delete(LEADER_REPLICAS),
                                                      AlterConfigOp.delete(FOLLOWER_REPLICAS)] for t in names})


def _alter_configs(admin: AdminClient, what: str, changes: Mapping[Any, list[Any]]) -> None:
    results = admin.incremental_alter_configs(changes, raise_on_error=False)
    failed = [f"{resource.name}: {error}" for resource, error in results.items() if error is not None]
    if failed:
        raise ToolError("\n".join([f"Error setting {what}:", *failed]))


def _fail_on_errors(heading: str, results: Mapping[TopicPartition, Any]) -> None:
    failed = [f"{tp}: {error}" for tp, error in sorted(results.items()) if error is not None]
    if failed:
        raise ToolError("\n".join([heading, *failed]))
