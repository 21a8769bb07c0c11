"""`bus`: one console script, sub-commands named after Kafka's tools."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

from bus.tools import (
    acls_cmd,
    broker_cmd,
    configs_cmd,
    console_consumer_cmd,
    console_producer_cmd,
    consumer_groups_cmd,
    consumer_perf_cmd,
    delete_records_cmd,
    dump_log_cmd,
    features_cmd,
    get_offsets_cmd,
    leader_election_cmd,
    log_dirs_cmd,
    metadata_quorum_cmd,
    producer_perf_cmd,
    reassign_partitions_cmd,
    storage_cmd,
    topics_cmd,
    transactions_cmd,
)
from bus.tools._common import add_version_arg, package_version

COMMANDS = {
    "broker": broker_cmd,
    "topics": topics_cmd,
    "configs": configs_cmd,
    "acls": acls_cmd,
    "consumer-groups": consumer_groups_cmd,
    "console-producer": console_producer_cmd,
    "console-consumer": console_consumer_cmd,
    "producer-perf-test": producer_perf_cmd,
    "consumer-perf-test": consumer_perf_cmd,
    "metadata-quorum": metadata_quorum_cmd,
    "leader-election": leader_election_cmd,
    "reassign-partitions": reassign_partitions_cmd,
    "storage": storage_cmd,
    "delete-records": delete_records_cmd,
    "log-dirs": log_dirs_cmd,
    "dump-log": dump_log_cmd,
    "get-offsets": get_offsets_cmd,
    "transactions": transactions_cmd,
    "features": features_cmd,
}

# The sub-commands whose Kafka tool takes `--version` (CommandDefaultOptions' tools, and kafka-transactions).
# kafka-storage, kafka-features, kafka-metadata-quorum and the broker itself do not.
VERSIONED = frozenset({"topics", "configs", "acls", "consumer-groups", "console-producer", "console-consumer",
                       "consumer-perf-test", "leader-election", "reassign-partitions", "delete-records", "log-dirs",
                       "dump-log", "get-offsets", "transactions"})


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad flag exits 1 as Kafka's tools do (argparse's own convention is 2)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(1, f"{self.prog}: error: {message}\n")


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(prog="bus", description="The data bus and its Kafka-style tools.")
    parser.add_argument("--version", action="version", version=package_version(), help="Print the version.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, module in COMMANDS.items():
        module.add_parser(sub, name)
        if name in VERSIONED:
            add_version_arg(sub.choices[name])
    args, extra = parser.parse_known_args(argv)
    if extra:  # report it with the sub-command's usage, not the top-level one
        getattr(args, "parser", parser).error(f"unrecognized arguments: {' '.join(extra)}")
    return int(args.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
