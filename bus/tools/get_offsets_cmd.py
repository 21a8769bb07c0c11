"""`bus get-offsets`: the offsets of topic partitions at a point in time, like kafka-get-offsets.sh (GetOffsetShell).

Prints `topic:partition:offset` per partition, sorted by topic and partition. `--time` is -1/latest (the
default: the high watermark), -2/earliest (the log start), -3/max-timestamp (the record with the largest
timestamp), or a timestamp in ms (the first offset whose timestamp is at or after it). As in Kafka, a partition
that has no such offset (a timestamp after every record) is left out rather than printed with a made-up value.
`--topic` is a regular expression matched against whole names; `--topic-partitions` takes Kafka's
`topic-regex[:partition|:start-end]` patterns, comma-separated. Filters that match no partition exit 1.
"""

from __future__ import annotations

import argparse
import re
from typing import TYPE_CHECKING

from bus.tools._common import ToolError, add_connection_args, admin_client, run_guarded

if TYPE_CHECKING:
    from bus.client.admin import AdminClient, TopicPartition

TIMES = {"latest": -1, "earliest": -2, "max-timestamp": -3, "earliest-local": -4, "latest-tiered": -5}
_PATTERN = re.compile(r"([^:,]*)(?::(?:([0-9]*)|(?:([0-9]*)-([0-9]*))))?")


def add_parser(sub: argparse._SubParsersAction, name: str) -> None:
    p = sub.add_parser(name, help="Offsets of topic partitions at a time (kafka-get-offsets).",
                       description="An interactive shell for getting topic-partition offsets.")
    add_connection_args(p, config_help="Property file containing configs to be passed to Admin Client.")
    p.add_argument("--topic-partitions", metavar="PATTERNS",
                   help="Comma separated list of topic-partition patterns to get the offsets for, with the format "
                        "of '([^:,]*)(?::(?:([0-9]*)|(?:([0-9]*)-([0-9]*))))?'. The first group is an optional regex "
                        "for the topic name, if omitted, it matches any topic name. The section after ':' describes "
                        "a partition pattern, which can be: a number, a range in the format of 'NUMBER-NUMBER' "
                        "(lower inclusive, upper exclusive), an inclusive lower bound in the format of 'NUMBER-', an "
                        "exclusive upper bound in the format of '-NUMBER' or may be omitted to accept all "
                        "partitions.")
    p.add_argument("--topic", metavar="TOPIC",
                   help="The topic to get the offsets for. It also accepts a regular expression. If not present, "
                        "all authorized topics are queried. Cannot be used if --topic-partitions is present.")
    p.add_argument("--partitions", metavar="PARTITION_IDS",
                   help="Comma separated list of partition ids to get the offsets for. If not present, all "
                        "partitions of the authorized topics are queried. Cannot be used if --topic-partitions is "
                        "present.")
    p.add_argument("--time", default="-1", metavar="TIMESTAMP",
                   help="timestamp of the offsets before that. [Note: No offset is returned, if the timestamp "
                        "greater than recently committed record timestamp is given.] Accepts the following values: "
                        "-1 or latest / -2 or earliest / -3 or max-timestamp / -4 or earliest-local / -5 or "
                        "latest-tiered / timestamp in ms (default: latest).")
    p.add_argument("--exclude-internal-topics", action="store_true",
                   help="By default, internal topics are included. If specified, internal topics are excluded.")
    p.set_defaults(run=run, parser=p)


def parse_time(text: str) -> int:
    """`--time`: a name from TIMES or an integer (negative specials or epoch ms), as GetOffsetShell parses it."""
    value = TIMES.get(text.strip().lower())
    if value is not None:
        return value
    try:
        return int(text)
    except ValueError:
        raise ToolError(f"Malformed time argument {text}. Please use -1 or latest / -2 or earliest / -3 or "
                        "max-timestamp / -4 or earliest-local / -5 or latest-tiered, or a specified long format "
                        "timestamp") from None


def parse_partitions(text: str) -> set[int]:
    try:
        return {int(p) for p in text.split(",") if p.strip()}
    except ValueError:
        raise ToolError(f"Invalid --partitions '{text}': expected comma-separated partition ids") from None


def _compile(regex: str) -> re.Pattern[str]:
    try:
        return re.compile(regex)
    except re.error as exc:
        raise ToolError(f"Invalid topic regular expression '{regex}': {exc}") from None


Filter = tuple[re.Pattern[str], int, int]  # topic regex, first partition, end partition (exclusive)


def topic_partition_filters(args: argparse.Namespace) -> list[Filter]:
    """`--topic`/`--partitions` or `--topic-partitions` as (topic regex, partition range) filters."""
    if args.topic_partitions is not None:
        if args.topic is not None or args.partitions is not None:
            raise ToolError("--topic-partitions cannot be used with --topic or --partitions")
        filters = []
        for item in args.topic_partitions.split(","):
            match = _PATTERN.fullmatch(item.strip())
            if match is None:
                raise ToolError(f"Invalid topic-partition expression: {item}")
            topic, single, lower, upper = match.groups()
            regex = _compile(topic or ".*")
            if single:
                filters.append((regex, int(single), int(single) + 1))
            else:
                filters.append((regex, int(lower) if lower else 0, int(upper) if upper else 2**31))
        return filters
    regex = _compile(args.topic if args.topic else ".*")
    if args.partitions is None:
        return [(regex, 0, 2**31)]
    return [(regex, p, p + 1) for p in sorted(parse_partitions(args.partitions))]


def run(args: argparse.Namespace) -> int:
    return run_guarded("get-offsets", lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    spec = parse_time(args.time)
    filters = topic_partition_filters(args)
    with admin_client(args) as admin:
        partitions = matching_partitions(admin, filters, args.exclude_internal_topics)
        if not partitions:
            raise ToolError("Could not match any topic-partitions with the specified filters")
        offsets = admin.list_offsets(dict.fromkeys(partitions, spec))
    for tp in sorted(partitions, key=lambda tp: (tp.topic, tp.partition)):
        offset = offsets[tp].offset
        if offset >= 0:  # Kafka leaves out a partition without an offset for the time (UNKNOWN_OFFSET)
            print(f"{tp.topic}:{tp.partition}:{offset}")
    return 0


def matching_partitions(admin: AdminClient, filters: list[Filter], exclude_internal: bool) -> list[TopicPartition]:
    topics = admin.list_topics(include_internal=not exclude_internal)
    wanted = [t for t in topics if any(regex.fullmatch(t) for regex, _, _ in filters)]
    if not wanted:
        return []
    return [tp for tp in admin.partitions_for(wanted)
            if any(regex.fullmatch(tp.topic) and low <= tp.partition < high for regex, low, high in filters)]
