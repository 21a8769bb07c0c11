"""`bus consumer-groups`: list, describe, delete consumer groups and reset their offsets (kafka-consumer-groups.sh).

Output follows Kafka's ConsumerGroupCommand column for column: `--describe` (offsets, the default)
prints GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID with `-`
for what is unknown, `--members` and `--state` their own tables, `--reset-offsets` the planned
GROUP TOPIC PARTITION NEW-OFFSET table (committed only with `--execute`; `--dry-run` is the default).
Unlike Kafka, a group that does not exist or cannot be reset makes the command exit 1, so scripts
can tell failure from success.
"""

from __future__ import annotations

import argparse
import datetime
import re
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bus.tools._common import ToolError, add_connection_args, admin_client, one_action, progress, run_guarded

if TYPE_CHECKING:
    from bus.client.admin import AdminClient, ConsumerGroupDescription, TopicPartition

MISSING = "-"
ACTIONS = ("list", "describe", "delete", "reset_offsets", "delete_offsets")
SCENARIOS = ("to_offset", "to_earliest", "to_latest", "to_current", "to_datetime", "by_duration", "shift_by",
             "from_file")
REBALANCING = {"PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling"}


def add_parser(sub: argparse._SubParsersAction, name: str) -> None:
    p = sub.add_parser(name, help="List, describe, delete consumer groups; reset their offsets "
                                  "(kafka-consumer-groups).",
                       description="This tool helps to list all consumer groups, describe a consumer group, delete "
                                   "consumer group info, or reset consumer group offsets.")
    add_connection_args(p, config_help="Property file containing configs to be passed to Admin Client and Consumer.")
    p.add_argument("--list", action="store_true", help="List all consumer groups.")
    p.add_argument("--describe", action="store_true",
                   help="Describe consumer group and list offset lag (number of messages not yet processed) related "
                        "to given group.")
    p.add_argument("--delete", action="store_true",
                   help="Pass in groups to delete topic partition offsets and ownership information over the entire "
                        "consumer group. For instance --group g1 --group g2")
    p.add_argument("--reset-offsets", action="store_true",
                   help="Reset offsets of consumer group. Supports one consumer group at the time, and instances "
                        "should be inactive. Has 2 execution options: --dry-run (the default) to plan which offsets "
                        "to reset, and --execute to update the offsets.")
    p.add_argument("--delete-offsets", action="store_true",
                   help="Delete offsets of consumer group. Supports one consumer group at the time, and multiple "
                        "topics.")
    p.add_argument("--group", action="append", help="The consumer group we wish to act on (repeatable).")
    p.add_argument("--all-groups", action="store_true", help="Apply to all consumer groups.")
    p.add_argument("--topic", action="append",
                   help="The topic whose consumer group information should be deleted or topic that should be "
                        "included in the reset offset process. In reset-offsets, partitions can be given as "
                        "'topic1:0,1,2'. Repeatable.")
    p.add_argument("--all-topics", action="store_true",
                   help="Consider all topics assigned to a group in the reset-offsets process.")
    p.add_argument("--members", action="store_true", help="Describe members of the group (with --describe).")
    p.add_argument("--offsets", action="store_true",
                   help="Describe the group and list all topic partitions in the group along with their offset lag "
                        "(the default sub-action of --describe).")
    p.add_argument("--state", nargs="?", const="", default=None, metavar="STATES",
                   help="With --describe, the state of the group; with --list, list groups with their state, "
                        "optionally only those in the given comma-separated states (e.g. stable,empty).")
    p.add_argument("--type", nargs="?", const="", default=None, metavar="TYPES",
                   help="With --list, show group types, optionally only the given comma-separated types "
                        "(classic,consumer).")
    p.add_argument("--verbose", action="store_true", help="Provide additional information, if any, when describing.")
    p.add_argument("--timeout", type=int, default=5000, metavar="MS",
                   help="The timeout that can be set for some use cases, e.g. when describing the group (default "
                        "5000 ms).")
    p.add_argument("--dry-run", action="store_true",
                   help="Only show results without executing changes on Consumer Groups. Supported operations: "
                        "reset-offsets.")
    p.add_argument("--execute", action="store_true", help="Execute operation. Supported operations: reset-offsets.")
    p.add_argument("--export", action="store_true", help="Export operation execution to a CSV format. Supported "
                                                         "operations: reset-offsets.")
    p.add_argument("--to-offset", type=int, metavar="OFFSET", help="Reset offsets to a specific offset.")
    p.add_argument("--to-earliest", action="store_true", help="Reset offsets to earliest offset.")
    p.add_argument("--to-latest", action="store_true", help="Reset offsets to latest offset.")
    p.add_argument("--to-current", action="store_true", help="Reset offsets to current offset.")
    p.add_argument("--to-datetime", metavar="DATETIME",
                   help="Reset offsets to offset from datetime. Format: 'YYYY-MM-DDTHH:mm:SS.sss' (local time "
                        "unless a zone such as Z or +01:00 is given).")
    p.add_argument("--by-duration", metavar="DURATION",
                   help="Reset offsets to offset by duration from current timestamp. Format: 'PnDTnHnMnS'.")
    p.add_argument("--shift-by", type=int, metavar="N",
                   help="Reset offsets shifting current offset by 'n', where 'n' can be positive or negative.")
    p.add_argument("--from-file", metavar="CSV", help="Reset offsets to values defined in CSV file.")
    p.set_defaults(run=run, parser=p)


def check_args(args: argparse.Namespace) -> str:
    """The action, after ConsumerGroupCommandOptions.checkArgs' consistency checks (Kafka's wording)."""
    action = one_action(args, ACTIONS, "--list, --describe, --delete, --reset-offsets, --delete-offsets")
    groups_scope = bool(args.group) or args.all_groups
    if action == "describe":
        if not groups_scope:
            raise ToolError("Option [describe] takes one of these options: [all-groups], [group]")
        if sum(map(bool, (args.members, args.offsets, args.state is not None))) > 1:
            raise ToolError("Option [describe] takes at most one of these options: [members], [offsets], [state]")
        if args.state:
            raise ToolError("Option [describe] does not take a value for [state]")
    elif args.members or args.offsets or args.verbose:
        raise ToolError("Options [members], [offsets] and [verbose] are only valid with [describe]")
    if args.state is not None and action not in ("describe", "list"):
        raise ToolError("Option [state] is only valid with [describe] or [list]")
    if args.type is not None and action != "list":
        raise ToolError("Option [type] is only valid with [list]")
    if action == "delete":
        if not groups_scope:
            raise ToolError("Option [delete] takes one of these options: [all-groups], [group]")
        if args.topic:
            raise ToolError("The consumer does not support topic-specific offset deletion from a consumer group.")
    if action == "delete_offsets" and (not args.group or len(args.group) != 1 or not args.topic):
        raise ToolError("Option [delete-offsets] takes the following options: [group], [topic]")
    scenarios = [s for s in SCENARIOS if getattr(args, s) not in (None, False)]
    if action == "reset_offsets":
        if args.dry_run and args.execute:
            raise ToolError("Option [reset-offsets] only accepts one of [execute] and [dry-run]")
        if not args.dry_run and not args.execute:
            print("WARN: No action will be performed as the --execute option is missing. In a future major "
                  "release, the default behavior of this command will be to prompt the user before executing the "
                  "reset rather than doing a dry run. You should add the --dry-run option explicitly if you are "
                  "scripting this command and want to keep the current default behavior without prompting.",
                  file=sys.stderr)
        if not groups_scope:
            raise ToolError("Option [reset-offsets] takes one of these options: [all-groups], [group]")
        if len(scenarios) != 1:
            raise ToolError("Option [reset-offsets] takes exactly one of these options: [to-offset], [to-earliest], "
                            "[to-latest], [to-current], [to-datetime], [by-duration], [shift-by], [from-file]")
        if not args.from_file and not (args.topic or args.all_topics):
            raise ToolError("Option [reset-offsets] takes one of these options: [all-topics], [topic]")
        if args.topic and args.all_topics:
            raise ToolError("Option [reset-offsets] takes only one of these options: [all-topics], [topic]")
    else:
        if scenarios:
            raise ToolError("Reset scenarios (--to-earliest, --to-latest, ...) are only valid with [reset-offsets]")
        if args.dry_run or args.execute or args.export:
            raise ToolError("Options [dry-run], [execute] and [export] are only valid with [reset-offsets]")
        if args.all_topics:
            raise ToolError("Option [all-topics] is only valid with [reset-offsets]")
    if action == "list" and (args.group or args.all_groups):
        raise ToolError("Option [list] does not take [group] or [all-groups]")
    return action


def run(args: argparse.Namespace) -> int:
    return run_guarded("consumer group", lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    action = check_args(args)
    if args.timeout <= 0:
        raise ToolError("--timeout must be positive")
    # Kafka's --timeout bounds each admin call (retries included), 5 s by default.
    with admin_client(args, {"default.api.timeout.ms": args.timeout}) as admin:
        if action == "list":
            return _list(admin, args)
        groups = admin_groups(admin, args)
        if action == "describe":
            return _describe(admin, args, groups)
        if action == "delete":
            return _delete(admin, groups)
        if action == "delete_offsets":
            return _delete_offsets(admin, args.group[0], args.topic)
        return _reset(admin, args, groups)


def admin_groups(admin: AdminClient, args: argparse.Namespace) -> list[str]:
    if args.all_groups:
        return [g.group_id for g in admin.list_consumer_groups()]
    return list(dict.fromkeys(args.group))


def error(message: str) -> None:
    """Kafka's printError: a blank line, then `Error: ...`, on stdout."""
    print(f"\nError: {message}")


# -- list -------------------------------------------------------------------------------------------


def _split(value: str | None) -> list[str]:
    return [v.strip() for v in (value or "").split(",") if v.strip()]


VALID_STATES = {s.lower(): s for s in ("PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty",
                                       "Assigning", "Reconciling")}


def _list(admin: AdminClient, args: argparse.Namespace) -> int:
    states = _split(args.state)
    types = [t.lower() for t in _split(args.type)]
    bad_states = [s for s in states if s.lower() not in VALID_STATES]
    if bad_states:
        raise ToolError(f"Invalid state list '{args.state}'. Valid states are: " + ", ".join(VALID_STATES.values()))
    bad_types = [t for t in types if t not in ("classic", "consumer")]
    if bad_types:
        raise ToolError(f"Invalid types list '{args.type}'. Valid types are: classic, consumer")
    listings = admin.list_consumer_groups(states=[VALID_STATES[s.lower()] for s in states], types=types)
    if args.state is None and args.type is None:
        for g in listings:
            print(g.group_id)
        return 0
    width = max([15, *(len(g.group_id) for g in listings)]) + 10
    columns: list[tuple[str, int, Callable[[Any], str]]] = [("GROUP", width, lambda g: g.group_id)]
    if args.type is not None:
        columns.append(("TYPE", 20, lambda g: (g.type or "unknown").capitalize()))
    if args.state is not None:
        columns.append(("STATE", 20, lambda g: g.state or "Unknown"))
    print(" ".join(f"{title:<{w}}" for title, w, _ in columns))
    for g in listings:
        print(" ".join(f"{cell(g):<{w}}" for _, w, cell in columns))
    return 0


# -- describe ---------------------------------------------------------------------------------------


@dataclass(slots=True)
class OffsetRow:
    group: str
    topic: str | None
    partition: int | None
    offset: int | None
    log_end: int | None
    leader_epoch: int | None
    consumer_id: str
    host: str
    client_id: str

    @property
    def lag(self) -> int | None:
        if self.offset is None or self.offset == -1 or self.log_end is None:
            return None
        return self.log_end - self.offset


def _fmt(value: object) -> str:
    return MISSING if value is None else str(value)


def _should_print(group: str, state: str | None, rows: int | None) -> bool:
    """Kafka's shouldPrintMemberState: warnings to stderr, and whether a table follows."""
    if rows is None or state == "Dead":
        error(f"Consumer group '{group}' does not exist.")
        return False
    if state == "Empty":
        print(f"\nConsumer group '{group}' has no active members.", file=sys.stderr)
    elif state in REBALANCING:
        print(f"\nWarning: Consumer group '{group}' is rebalancing.", file=sys.stderr)
    return rows > 0


def _describe_groups(admin: AdminClient, groups: list[str]) -> dict[str, ConsumerGroupDescription | None]:
    from bus.client.admin import GroupIdNotFoundError

    out: dict[str, ConsumerGroupDescription | None] = {}
    for group in groups:
        try:
            out[group] = admin.describe_consumer_groups([group])[group]
        except GroupIdNotFoundError:
            out[group] = None
    return dict(sorted(out.items()))


def _describe(admin: AdminClient, args: argparse.Namespace, groups: list[str]) -> int:
    described = _describe_groups(admin, groups)
    missing = [g for g, d in described.items() if d is None or d.state == "Dead"]
    if args.members:
        _print_members(described, args.verbose)
    elif args.state is not None:
        _print_states(described, args.verbose)
    else:
        _print_offsets(admin, described, args.verbose)
    return 1 if missing else 0


def collect_offsets(admin: AdminClient, group: str, desc: ConsumerGroupDescription) -> list[OffsetRow]:
    """One row per assigned partition (members with most partitions first), then committed-but-unassigned ones."""
    from bus.client.admin import OffsetSpec

    committed = admin.list_consumer_group_offsets(group)
    rows: list[OffsetRow] = []
    assigned: set[TopicPartition] = set()
    members = sorted((m for m in desc.members if m.assignment), key=lambda m: -len(m.assignment))
    plan: list[tuple[list[TopicPartition], str, str, str]] = [
        (sorted(m.assignment), m.member_id, m.host, m.client_id) for m in members]
    for parts, *_ in plan:
        assigned.update(parts)
    unassigned = sorted(tp for tp in committed if tp not in assigned)
    if unassigned:
        plan.append((unassigned, MISSING, MISSING, MISSING))
    every = sorted({tp for parts, *_ in plan for tp in parts})
    log_end = _log_end_offsets(admin, every, OffsetSpec.LATEST)
    for parts, consumer_id, host, client_id in plan:
        for tp in parts:
            om = committed.get(tp)
            rows.append(OffsetRow(group, tp.topic, tp.partition, None if om is None else om.offset, log_end.get(tp),
                                  None if om is None else om.leader_epoch, consumer_id, host, client_id))
    return rows


def _log_end_offsets(admin: AdminClient, partitions: list[TopicPartition], spec: int) -> dict[TopicPartition, int]:
    """Offsets by spec for partitions that still exist (a deleted topic's committed offsets show `-`)."""
    from bus.client.admin import UnknownTopicOrPartitionError

    if not partitions:
        return {}
    existing = set(admin.list_topics(include_internal=True))
    live = [tp for tp in partitions if tp.topic in existing]
    try:
        return {tp: info.offset for tp, info in admin.list_offsets({tp: spec for tp in live}).items()}
    except UnknownTopicOrPartitionError:
        return {}


def _print_offsets(admin: AdminClient, described: dict[str, ConsumerGroupDescription | None], verbose: bool) -> None:
    for group, desc in described.items():
        rows = None if desc is None else collect_offsets(admin, group, desc)
        if not _should_print(group, None if desc is None else desc.state, None if rows is None else len(rows)):
            continue
        assert rows is not None
        g = max([15, *(len(r.group) for r in rows)])
        t = max([15, *(len(r.topic or MISSING) for r in rows)])
        c = max([15, *(len(r.consumer_id) for r in rows)])
        h = max([15, *(len(r.host) for r in rows)])
        out = []
        if verbose:
            out.append(f"{'GROUP':<{g}} {'TOPIC':<{t}} {'PARTITION':<10} {'LEADER-EPOCH':<15} {'CURRENT-OFFSET':<15} "
                       f"{'LOG-END-OFFSET':<15} {'LAG':<15} {'CONSUMER-ID':<{c}} {'HOST':<{h}} CLIENT-ID")
        else:
            out.append(f"{'GROUP':<{g}} {'TOPIC':<{t}} {'PARTITION':<10} {'CURRENT-OFFSET':<15} {'LOG-END-OFFSET':<15} "
                       f"{'LAG':<15} {'CONSUMER-ID':<{c}} {'HOST':<{h}} CLIENT-ID")
        for r in rows:
            epoch = f" {_fmt(r.leader_epoch):<15}" if verbose else ""
            out.append(f"{r.group:<{g}} {_fmt(r.topic):<{t}} {_fmt(r.partition):<10}{epoch} {_fmt(r.offset):<15} "
                       f"{_fmt(r.log_end):<15} {_fmt(r.lag):<15} {r.consumer_id:<{c}} {r.host:<{h}} {r.client_id}")
        print("\n" + "\n".join(out))


def _assignment_string(parts: Iterable[TopicPartition]) -> str:
    by_topic: dict[str, list[int]] = {}
    for tp in parts:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return ";".join(sorted(f"{topic}:{','.join(map(str, sorted(ps)))}" for topic, ps in by_topic.items()))


def _print_members(described: dict[str, ConsumerGroupDescription | None], verbose: bool) -> None:
    for group, desc in described.items():
        members = None if desc is None else desc.members
        printable = _should_print(group, None if desc is None else desc.state,
                                  None if members is None else len(members))
        if desc is None or desc.state == "Dead":
            continue
        members = members or []
        g = max([15, len(group)])
        c = max([15, *(len(m.member_id) for m in members)]) if printable else 15
        i = max([17, *(len(m.group_instance_id or "") for m in members)]) if printable else 17
        h = max([15, *(len(m.host) for m in members)]) if printable else 15
        cl = max([15, *(len(m.client_id) for m in members)]) if printable else 15
        current = [_assignment_string(m.assignment) or MISSING for m in members]
        target = [_assignment_string(m.target_assignment or []) or MISSING for m in members]
        ca = max([20, *map(len, current)]) if printable else 20
        ta = max([20, *map(len, target)]) if printable else 20
        with_instance = printable and any(m.group_instance_id for m in members)

        def base(cols: tuple[str, ...], with_instance: bool = with_instance, g: int = g, c: int = c, i: int = i,
                 h: int = h, cl: int = cl) -> str:
            if with_instance:
                return f"{cols[0]:<{g}} {cols[1]:<{c}} {cols[2]:<{i}} {cols[3]:<{h}} {cols[4]:<{cl}} {cols[5]:<15} "
            return f"{cols[0]:<{g}} {cols[1]:<{c}} {cols[3]:<{h}} {cols[4]:<{cl}} {cols[5]:<15} "

        header = base(("GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS"))
        if verbose:
            header += (f"{'CURRENT-EPOCH':<15} {'CURRENT-ASSIGNMENT':<{ca}} {'TARGET-EPOCH':<15} "
                       f"{'TARGET-ASSIGNMENT':<{ta}}")
        lines = ["", header]
        for m, cur, tgt in zip(members, current, target, strict=True):
            line = base((group, m.member_id, m.group_instance_id or "", m.host, m.client_id, str(len(m.assignment))))
            if verbose:
                line += (f"{_fmt(m.member_epoch):<15} {cur:<{ca}} {_fmt(desc.target_assignment_epoch):<15} "
                         f"{tgt:<{ta}}")
            lines.append(line)
        print("\n".join(lines))


def _print_states(described: dict[str, ConsumerGroupDescription | None], verbose: bool) -> None:
    for group, desc in described.items():
        if not _should_print(group, None if desc is None else desc.state, None if desc is None else 1):
            continue
        assert desc is not None
        coordinator = f"{desc.coordinator.host}:{desc.coordinator.port}  ({desc.coordinator.node_id})"
        cw = max(25, len(coordinator))
        gw = max(15, len(group))
        strategy = desc.partition_assignor or MISSING
        if verbose:
            head = (f"{'GROUP':<{gw}} {'COORDINATOR (ID)':<{cw}} {'ASSIGNMENT-STRATEGY':<20} {'STATE':<20} "
                    f"{'GROUP-EPOCH':<15} {'TARGET-ASSIGNMENT-EPOCH':<25} #MEMBERS")
            row = (f"{group:<{gw}} {coordinator:<{cw}} {strategy:<20} {desc.state:<20} {_fmt(desc.group_epoch):<15} "
                   f"{_fmt(desc.target_assignment_epoch):<25} {len(desc.members)}")
        else:
            head = f"{'GROUP':<{gw}} {'COORDINATOR (ID)':<{cw}} {'ASSIGNMENT-STRATEGY':<20} {'STATE':<20} #MEMBERS"
            row = f"{group:<{gw}} {coordinator:<{cw}} {strategy:<20} {desc.state:<20} {len(desc.members)}"
        print(f"\n{head}\n{row}")


# -- delete -----------------------------------------------------------------------------------------


def _delete(admin: AdminClient, groups: list[str]) -> int:
    results = admin.delete_consumer_groups(groups, raise_on_error=False)
    ok = [g for g, e in results.items() if e is None]
    failed = {g: e for g, e in results.items() if e is not None}
    quoted = ", ".join(f"'{g}'" for g in ok)
    if not failed:
        print(f"Deletion of requested consumer groups ({quoted}) was successful.")
        return 0
    error("Deletion of some consumer groups failed:")
    for group, exc in failed.items():
        print(f"* Group '{group}' could not be deleted due to: {exc}")
    if ok:
        print(f"\nThese consumer groups were deleted successfully: {quoted}")
    return 1


def _delete_offsets(admin: AdminClient, group: str, topics: list[str]) -> int:
    from bus.client.admin import AdminError, TopicPartition

    partitions: set[TopicPartition] = set()
    errors: dict[TopicPartition, str | None] = {}
    plain = [t for t in topics if ":" not in t]
    for spec in topics:
        if ":" in spec:
            partitions.update(parse_topic_partitions(spec))
    for topic in plain:
        try:
            partitions.update(admin.partitions_for([topic]))
        except AdminError as exc:
            errors[TopicPartition(topic, -1)] = str(exc)
    top_error: AdminError | None = None
    try:
        results = admin.delete_consumer_group_offsets(group, sorted(partitions))
    except AdminError as exc:
        top_error, results = exc, {}
    for tp in partitions:
        err = results.get(tp)
        errors[tp] = None if tp in results and err is None else str(err or top_error or "not deleted")
    if top_error is None and all(e is None for e in errors.values()):
        print(f"Request succeeded for deleting offsets from group {group}.")
    elif top_error is not None and top_error.name in ("INVALID_GROUP_ID", "GROUP_ID_NOT_FOUND",
                                                       "GROUP_AUTHORIZATION_FAILED", "NON_EMPTY_GROUP"):
        error(top_error.message)
    else:
        error("Encountered some partition-level error, see the follow-up details.")
    width = max([15, *(len(tp.topic) for tp in errors)])
    lines = [f"{'TOPIC':<{width}} {'PARTITION':<10} {'STATUS':<15}"]
    for tp, problem in sorted(errors.items()):
        part = str(tp.partition) if tp.partition >= 0 else MISSING
        lines.append(f"{tp.topic:<{width}} {part:<10} {'Successful' if problem is None else 'Error: ' + problem:<15}")
    print("\n" + "\n".join(lines))
    return 0 if top_error is None and all(e is None for e in errors.values()) else 1


# -- reset offsets ----------------------------------------------------------------------------------


def parse_topic_partitions(spec: str) -> list[TopicPartition]:
    from bus.client.admin import TopicPartition

    pieces = spec.split(":")
    if len(pieces) != 2:
        raise ToolError(f"Invalid topic arg '{spec}', expected topic name and partitions")
    topic, parts = pieces
    out = []
    for p in parts.split(","):
        try:
            out.append(TopicPartition(topic, int(p)))
        except ValueError:
            raise ToolError(f"Invalid partition '{p}' specified in topic arg '{spec}''") from None
    return out


_DURATION = re.compile(r"^(?P<sign>[-+]?)P(?:(?P<days>\d+(?:\.\d+)?)D)?(?:T(?:(?P<hours>\d+(?:\.\d+)?)H)?"
                       r"(?:(?P<minutes>\d+(?:\.\d+)?)M)?(?:(?P<seconds>\d+(?:\.\d+)?)S)?)?$", re.IGNORECASE)


def parse_duration(text: str) -> datetime.timedelta:
    """ISO-8601 `PnDTnHnMnS` (java.time.Duration.parse's grammar)."""
    m = _DURATION.match(text.strip())
    if not m or not any(m.group(k) for k in ("days", "hours", "minutes", "seconds")):
        raise ToolError(f"Error parsing duration '{text}': expected the ISO-8601 format PnDTnHnMnS")
    delta = datetime.timedelta(days=float(m.group("days") or 0), hours=float(m.group("hours") or 0),
                               minutes=float(m.group("minutes") or 0), seconds=float(m.group("seconds") or 0))
    return -delta if m.group("sign") == "-" else delta


def parse_datetime(text: str) -> int:
    """`YYYY-MM-DDTHH:mm:SS.sss` with an optional zone (Z, +01:00, +0100): epoch milliseconds.

    Without a zone the local time zone applies, as Kafka's Utils.getDateTime does.
    """
    value = text.strip()
    if re.search(r"[+-]\d{4}$", value):
        value = value[:-2] + ":" + value[-2:]
    try:
        moment = datetime.datetime.fromisoformat(value)
    except ValueError:
        raise ToolError(f"Error parsing timestamp '{text}': expected the format 'YYYY-MM-DDTHH:mm:SS.sss'") from None
    if moment.tzinfo is None:
        moment = moment.astimezone()  # local time
    return int(moment.timestamp() * 1000)


def _partitions_to_reset(admin: AdminClient, args: argparse.Namespace, group: str,
                         committed: Mapping[TopicPartition, object]) -> list[TopicPartition]:
    if args.all_topics:
        return sorted(committed)
    out: list[TopicPartition] = []
    plain = []
    for spec in args.topic or ():
        if ":" in spec:
            out += parse_topic_partitions(spec)
        else:
            plain.append(spec)
    if plain:
        out += admin.partitions_for(plain)
    return sorted(set(out))


def _clamp(admin: AdminClient, requested: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
    """GroupOffsetsResetter.checkOffsetsRange: keep each new offset within [log start, log end]."""
    from bus.client.admin import OffsetSpec

    if not requested:
        return {}
    start = {tp: i.offset for tp, i in admin.list_offsets({tp: OffsetSpec.EARLIEST for tp in requested}).items()}
    end = {tp: i.offset for tp, i in admin.list_offsets({tp: OffsetSpec.LATEST for tp in requested}).items()}
    out: dict[TopicPartition, int] = {}
    for tp, offset in requested.items():
        if offset > end[tp]:
            print(f"WARN: New offset ({offset}) is higher than latest offset for topic partition {tp}. Value will be "
                  f"set to {end[tp]}.", file=sys.stderr)
            out[tp] = end[tp]
        elif offset < start[tp]:
            print(f"WARN: New offset ({offset}) is lower than earliest offset for topic partition {tp}. Value will "
                  f"be set to {start[tp]}.", file=sys.stderr)
            out[tp] = start[tp]
        else:
            out[tp] = offset
    return out


def _read_reset_file(path: str, groups: list[str]) -> dict[str, dict[TopicPartition, int]]:
    from bus.client.admin import TopicPartition

    try:
        lines = [line.strip() for line in open(path, encoding="utf-8").read().splitlines() if line.strip()]  # noqa: SIM115
    except OSError as exc:
        raise ToolError(f"Cannot read --from-file {path}: {exc}") from None
    plan: dict[str, dict[TopicPartition, int]] = {}
    for line in lines:
        cells = [c.strip() for c in line.split(",")]
        try:
            if len(cells) == 3 and len(groups) == 1:
                plan.setdefault(groups[0], {})[TopicPartition(cells[0], int(cells[1]))] = int(cells[2])
            elif len(cells) == 4:
                plan.setdefault(cells[0], {})[TopicPartition(cells[1], int(cells[2]))] = int(cells[3])
            else:
                raise ValueError
        except ValueError:
            raise ToolError(f"Invalid line in {path}: '{line}' (expected [group,]topic,partition,offset)") from None
    return plan


def prepare_offsets(admin: AdminClient, args: argparse.Namespace, group: str) -> dict[TopicPartition, int]:
    """The new offset of every partition in scope, per the chosen reset scenario."""
    from bus.client.admin import OffsetSpec

    committed = {tp: om.offset for tp, om in admin.list_consumer_group_offsets(group).items()}
    if args.from_file:
        return dict(sorted(_read_reset_file(args.from_file, [group]).get(group, {}).items()))
    partitions = _partitions_to_reset(admin, args, group, committed)
    if not partitions:
        return {}
    admin.describe_topics({tp.topic for tp in partitions})  # unknown topics fail here, with Kafka's error
    if args.to_offset is not None:
        return _clamp(admin, {tp: args.to_offset for tp in partitions})
    if args.to_earliest:
        return _log_end_offsets(admin, partitions, OffsetSpec.EARLIEST)
    if args.to_latest:
        return _log_end_offsets(admin, partitions, OffsetSpec.LATEST)
    if args.shift_by is not None:
        missing = [tp for tp in partitions if tp not in committed]
        if missing:
            raise ToolError(f"Cannot shift offset for partition {missing[0]} since there is no current committed "
                            "offset")
        return _clamp(admin, {tp: committed[tp] + args.shift_by for tp in partitions})
    if args.to_current:
        ends = _log_end_offsets(admin, [tp for tp in partitions if tp not in committed], OffsetSpec.LATEST)
        return {tp: committed[tp] if tp in committed else ends[tp] for tp in partitions}
    if args.to_datetime is not None or args.by_duration is not None:
        if args.to_datetime is not None:
            timestamp = parse_datetime(args.to_datetime)
        else:
            timestamp = int((time.time() - parse_duration(args.by_duration).total_seconds()) * 1000)
        found = admin.list_offsets({tp: timestamp for tp in partitions})
        out = {tp: info.offset for tp, info in found.items() if info.offset >= 0}
        empty = [tp for tp in partitions if tp not in out]
        for tp in empty:
            print(f"\nWarn: Partition {tp.partition} from topic {tp.topic} is empty. Falling back to latest known "
                  "offset.")
        out.update(_log_end_offsets(admin, empty, OffsetSpec.LATEST))
        return dict(sorted(out.items()))
    raise ToolError("Option [reset-offsets] requires one of the reset scenarios")


def _reset(admin: AdminClient, args: argparse.Namespace, groups: list[str]) -> int:
    from bus.client.admin import GroupIdNotFoundError

    execute = bool(args.execute)
    plans: dict[str, dict[TopicPartition, int]] = {}
    failed = False
    with progress("resetting offsets", total=len(groups)) as bar:
        for group in groups:
            try:
                state = admin.describe_consumer_groups([group])[group].state
            except GroupIdNotFoundError:
                state = "Dead"
            if state not in ("Empty", "Dead"):
                error(f"Assignments can only be reset if the group '{group}' is inactive, but the current state is "
                      f"{state}.")
                plans[group] = {}
                failed = True
                bar.advance()
                continue
            plan = prepare_offsets(admin, args, group)
            if execute and plan:
                admin.alter_consumer_group_offsets(group, plan)
            plans[group] = plan
            bar.advance()
    if args.export:
        single = len(groups) == 1
        for group, plan in plans.items():
            for tp, offset in plan.items():
                row = f"{tp.topic},{tp.partition},{offset}"
                print(row if single else f"{group},{row}")
    else:
        print_offsets_to_reset(plans)
    return 1 if failed else 0


def print_offsets_to_reset(plans: dict[str, dict[TopicPartition, int]]) -> None:
    """GroupOffsetsResetter.printOffsetsToReset: GROUP TOPIC PARTITION NEW-OFFSET."""
    g = max([15, *(len(group) for group in plans)])
    t = max([15, *(len(tp.topic) for plan in plans.values() for tp in plan)])
    lines = []
    if plans:
        lines.append(f"{'GROUP':<{g}} {'TOPIC':<{t}} {'PARTITION':<10} NEW-OFFSET")
    for group, plan in plans.items():
        for tp, offset in plan.items():
            lines.append(f"{group:<{g}} {tp.topic:<{t}} {tp.partition:<10} {offset}")
    print("\n" + "\n".join(lines) if lines else "")
