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
    leader_election_cmd,
    metadata_quorum_cmd,
    producer_perf_cmd,
    reassign_partitions_cmd,
    storage_cmd,
    topics_cmd,
)

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
}


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad flag exits 1 as Kafka's tools do (argparse's own convention is 2)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(1, f"{self.prog}: error: {message}\n")


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(prog="bus", description="The data bus and its Kafka-style tools.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, module in COMMANDS.items():
        module.add_parser(sub, name)
    args, extra = parser.parse_known_args(argv)
    if extra:  # report it with the sub-command's usage, not the top-level one
        getattr(args, "parser", parser).error(f"unrecognized arguments: {' '.join(extra)}")
    return int(args.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
