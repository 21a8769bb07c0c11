"""`bus log-dirs`: where each broker keeps each partition and how big it is, like kafka-log-dirs.sh (LogDirsCommand).

`--describe` asks each broker (all, or `--broker-list`) with DescribeLogDirs and prints Kafka's three
outputs: "Querying brokers for log directories information", "Received log directory information from brokers
1,2", then one line of JSON, `{"version":1,"brokers":[{"broker":1,"logDirs":[{"logDir":...,"error":null,
"partitions":[{"partition":"t-0","size":N,"offsetLag":0,"isFuture":false}]}]}]}`, keys in that order, the
partitions limited to `--topic-list` if given. A log dir's error is its Kafka error name where Java prints the
exception's class. A broker in `--broker-list` that is not in the cluster exits 1 with Kafka's message (Kafka
prints it and exits 0).
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from bus.tools._common import ToolError, add_connection_args, admin_client, run_guarded

if TYPE_CHECKING:
    from bus.client.admin import LogDirDescription


def add_parser(sub: argparse._SubParsersAction, name: str) -> None:
    p = sub.add_parser(name, help="Describe the brokers' log directories (kafka-log-dirs).",
                       description="This tool helps to query log directory usage on the specified brokers.")
    add_connection_args(p, config_help="Property file containing configs to be passed to Admin Client.")
    p.add_argument("--describe", action="store_true", help="Describe the specified log directories on the specified "
                                                           "brokers.")
    p.add_argument("--topic-list", default="", metavar="TOPICS",
                   help='The list of topics to be queried in the form "topic1,topic2,topic3". All topics will be '
                        "queried if no topic list is specified")
    p.add_argument("--broker-list", metavar="BROKERS",
                   help='The list of brokers to be queried in the form "0,1,2". All brokers in the cluster will be '
                        "queried if no broker list is specified")
    p.set_defaults(run=run, parser=p)


def run(args: argparse.Namespace) -> int:
    return run_guarded("log-dirs", lambda: _run(args))


def parse_brokers(text: str) -> list[int]:
    try:
        return sorted({int(b) for b in text.split(",") if b.strip()})
    except ValueError:
        raise ToolError(f'Invalid --broker-list "{text}": expected broker ids in the form "0,1,2"') from None


def _run(args: argparse.Namespace) -> int:
    if not args.describe:
        raise ToolError("Command must include exactly one action: --describe")
    topics = {t.strip() for t in args.topic_list.split(",") if t.strip()}
    with admin_client(args) as admin:
        cluster = sorted(b.node_id for b in admin.describe_cluster().brokers)
        wanted = cluster if args.broker_list is None else parse_brokers(args.broker_list)
        missing = [b for b in wanted if b not in cluster]
        if missing:
            raise ToolError(f"ERROR: The given brokers do not exist from --broker-list: "
                            f"{','.join(map(str, missing))}. Current existent brokers: {','.join(map(str, cluster))}")
        print("Querying brokers for log directories information")
        described = admin.describe_log_dirs(wanted)
    print(f"Received log directory information from brokers {','.join(map(str, wanted))}")
    print(format_json(described, topics))
    return 0


def format_json(described: dict[int, list[LogDirDescription]], topics: set[str]) -> str:
    """LogDirsCommand's JSON (compact, keys in Kafka's documented order)."""

    def log_dir(d: LogDirDescription) -> dict[str, Any]:
        return {"logDir": d.path, "error": None if d.error is None else d.error.name,
                "partitions": [{"partition": str(tp), "size": info.size, "offsetLag": info.offset_lag,
                                "isFuture": info.is_future}
                               for tp, info in sorted(d.replicas.items()) if not topics or tp.topic in topics]}

    return json.dumps({"version": 1, "brokers": [{"broker": broker, "logDirs": [log_dir(d) for d in dirs]}
                                                 for broker, dirs in described.items()]},
                      separators=(",", ":"))
