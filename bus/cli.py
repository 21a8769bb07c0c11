"""`bus`: one console script, sub-commands named after Kafka's tools."""

from __future__ import annotations

import argparse
import sys

from bus.tools import broker_cmd

COMMANDS = {
    "broker": broker_cmd,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bus", description="The data bus and its Kafka-style tools.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, module in COMMANDS.items():
        module.add_parser(sub, name)
    args = parser.parse_args(argv)
    return int(args.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
