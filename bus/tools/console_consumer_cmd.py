"""`bus console-consumer`: print records to stdout, like kafka-console-consumer.sh.

Each record is printed by Kafka's DefaultMessageFormatter rules: optional `CreateTime:<ms>`,
`Partition:<p>`, `Offset:<o>`, headers `k:v,k2:v2` (or `NO_HEADERS`) and key, each followed by
`key.separator` (tab), then the value and `line.separator`; a null key, value or header value prints
`null.literal`. Without `--group` a throw-away group `console-consumer-NNNNN` is used with
auto-commit off, as Kafka does; with `--partition` the partition is assigned directly (no group) and
`--offset` picks the start. At the end `Processed a total of N messages` goes to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import re
import signal
import sys
import time
from dataclasses import dataclass
from typing import Any, BinaryIO

from bus.tools._common import (
    ToolError,
    add_connection_args,
    check_reachable,
    load_client_config,
    parse_key_values,
    run_guarded,
)


def add_parser(sub: argparse._SubParsersAction, name: str) -> None:
    p = sub.add_parser(name, help="Print records to stdout (kafka-console-consumer).",
                       description="This tool helps to read data from Kafka topics and outputs it to standard "
                                   "output.")
    add_connection_args(p, config_help="Consumer config properties file. Note that --consumer-property takes "
                                       "precedence.", config_aliases=("--consumer.config",))
    p.add_argument("--topic", help="The topic to consume on.")
    p.add_argument("--include", metavar="REGEX",
                   help="Regular expression specifying list of topics to include for consumption.")
    p.add_argument("--partition", type=int, help="The partition to consume from. Consumption starts from the end "
                                                 "of the partition unless '--offset' is specified.")
    p.add_argument("--offset", default=None,
                   help="The offset to start consuming from: a non-negative number, or 'earliest' / 'latest' "
                        "(default: latest).")
    p.add_argument("--from-beginning", action="store_true",
                   help="If the consumer does not already have an established offset to consume from, start with "
                        "the earliest message present in the log rather than the latest message.")
    p.add_argument("--group", help="The consumer group id of the consumer.")
    p.add_argument("--max-messages", type=int, metavar="N",
                   help="The maximum number of messages to consume before exiting. If not set, consumption is "
                        "continual.")
    p.add_argument("--timeout-ms", type=int, metavar="MS",
                   help="If specified, exit if no message is available for consumption for the specified interval.")
    p.add_argument("--skip-message-on-error", action="store_true",
                   help="If there is an error when processing a message, skip it instead of halt.")
    p.add_argument("--property", "--formatter-property", dest="property", action="extend", nargs="+",
                   metavar="PROP=VALUE",
                   help="Formatter properties: print.timestamp, print.key, print.offset, print.partition, "
                        "print.headers, print.value, key.separator, line.separator, headers.separator, "
                        "null.literal (repeatable).")
    p.add_argument("--consumer-property", action="extend", nargs="+", metavar="PROP=VALUE",
                   help="A mechanism to pass user-defined properties in the form key=value to the consumer.")
    p.add_argument("--isolation-level", choices=("read_committed", "read_uncommitted"),
                   help="Set to read_committed in order to filter out transactional messages which are not "
                        "committed. Set to read_uncommitted to read all messages (default).")
    p.set_defaults(run=run, parser=p)


@dataclass(slots=True)
class Formatter:
    """Kafka's DefaultMessageFormatter."""

    print_timestamp: bool = False
    print_key: bool = False
    print_value: bool = True
    print_partition: bool = False
    print_offset: bool = False
    print_headers: bool = False
    key_separator: bytes = b"\t"
    line_separator: bytes = b"\n"
    headers_separator: bytes = b","
    null_literal: bytes = b"null"

    @classmethod
    def from_properties(cls, props: dict[str, str]) -> Formatter:
        def flag(name: str, default: bool) -> bool:
            return props[name].strip().lower() == "true" if name in props else default

        def text(name: str, default: bytes) -> bytes:
            return _unescape(props[name]).encode() if name in props else default

        return cls(print_timestamp=flag("print.timestamp", False), print_key=flag("print.key", False),
                   print_value=flag("print.value", True), print_partition=flag("print.partition", False),
                   print_offset=flag("print.offset", False), print_headers=flag("print.headers", False),
                   key_separator=text("key.separator", b"\t"), line_separator=text("line.separator", b"\n"),
                   headers_separator=text("headers.separator", b","), null_literal=text("null.literal", b"null"))

    def format(self, record: Any) -> bytes:
        fields: list[bytes] = []
        if self.print_timestamp:
            kind = {0: "CreateTime", 1: "LogAppendTime"}.get(record.timestamp_type)
            fields.append(f"{kind}:{record.timestamp}".encode() if kind else b"NO_TIMESTAMP")
        if self.print_partition:
            fields.append(f"Partition:{record.partition}".encode())
        if self.print_offset:
            fields.append(f"Offset:{record.offset}".encode())
        if self.print_headers:
            headers = list(record.headers or ())
            fields.append(self.headers_separator.join(
                k.encode() + b":" + (self.null_literal if v is None else bytes(v)) for k, v in headers)
                if headers else b"NO_HEADERS")
        if self.print_key:
            fields.append(self.null_literal if record.key is None else bytes(record.key))
        if self.print_value:
            fields.append(self.null_literal if record.value is None else bytes(record.value))
        if not fields:
            return b""
        return self.key_separator.join(fields) + self.line_separator


def _unescape(value: str) -> str:
    """`\\t`, `\\n` typed on a command line mean tab and newline, as in Java properties."""
    return value.replace("\\t", "\t").replace("\\n", "\n").replace("\\r", "\r")


def consumer_settings(args: argparse.Namespace) -> tuple[dict[str, Any], bool]:
    """(consumer config, whether the group was given) following ConsoleConsumerOptions."""
    conf = load_client_config(args, {"client.id": "console-consumer"})
    conf.update(parse_key_values(args.consumer_property, "consumer property"))
    if args.isolation_level:
        conf["isolation.level"] = args.isolation_level
    if args.group:
        if "group.id" in conf and conf["group.id"] != args.group:
            raise ToolError(f"Group id ({args.group}) specified twice with different values (consumer property "
                            f"has {conf['group.id']})")
        conf["group.id"] = args.group
    group_given = "group.id" in conf
    if args.partition is None and not group_given:
        conf["group.id"] = f"console-consumer-{random.randrange(100_000)}"
        conf.setdefault("enable.auto.commit", "false")  # a throw-away group: keep its offsets out of the cache
    reset = "earliest" if args.from_beginning else "latest"
    if "auto.offset.reset" in conf and args.from_beginning and conf["auto.offset.reset"] != "earliest":
        raise ToolError("Can't simultaneously specify --from-beginning and "
                        f"'auto.offset.reset={conf['auto.offset.reset']}'")
    conf.setdefault("auto.offset.reset", reset)
    return conf, group_given


def check_args(args: argparse.Namespace) -> None:
    if bool(args.topic) == bool(args.include):
        raise ToolError("Exactly one of --include/--topic is required.")
    if args.partition is not None and not args.topic:
        raise ToolError("The topic is required when partition is specified.")
    if args.offset is not None and args.partition is None:
        raise ToolError("The partition is required when offset is specified.")
    if args.partition is not None and args.group:
        raise ToolError("Options group and partition cannot be specified together.")
    if args.from_beginning and args.offset is not None:
        raise ToolError("Options from-beginning and offset cannot be specified together.")
    if args.offset is not None and args.offset not in ("earliest", "latest"):
        try:
            if int(args.offset) < 0:
                raise ValueError
        except ValueError:
            raise ToolError(f"The provided offset value '{args.offset}' is incorrect. Valid values are 'earliest', "
                            "'latest', or a non-negative long.") from None
    if args.max_messages is not None and args.max_messages < 0:
        raise ToolError("--max-messages must not be negative")


class _Termination:
    """SIGTERM: finish like Ctrl-C (close the consumer, print the count), at the poll loop's next turn.

    A flag, not an exception raised from the handler: an exception lands wherever the main thread happens to
    be, e.g. inside the client between taking a lock and the `try` that releases it, and the consumer's
    close() then waited forever (a CI run's console consumer outlived its SIGTERM by 20 s)."""

    def __init__(self) -> None:
        self.requested = False

    def __call__(self, _sig: int, _frame: Any) -> None:
        self.requested = True


def run(args: argparse.Namespace) -> int:
    return run_guarded("console consumer", lambda: _run(args))


def _run(args: argparse.Namespace) -> int:

    check_args(args)
    termination = _Termination()
    previous = signal.signal(signal.SIGTERM, termination)
    try:
        return _consume(args, termination)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _consume(args: argparse.Namespace, termination: _Termination) -> int:
    from bus.client.consumer import KafkaConsumer, TopicPartition
    from bus.client.errors import KafkaError

    formatter = Formatter.from_properties(parse_key_values(args.property, "property"))
    conf, _group_given = consumer_settings(args)
    check_reachable(conf)
    try:
        consumer = KafkaConsumer(conf)
    except KafkaError as exc:
        raise ToolError(f"Invalid consumer configuration: {exc}") from None
    out: BinaryIO = sys.stdout.buffer
    count = 0
    try:
        if args.partition is not None:
            tp = TopicPartition(args.topic, args.partition)
            if args.partition not in consumer.partitions_for_topic(args.topic):
                raise ToolError(f"Partition {args.partition} of topic {args.topic} does not exist")
            consumer.assign([tp])
            start = args.offset or ("earliest" if args.from_beginning else "latest")
            if start == "earliest":
                consumer.seek_to_beginning([tp])
            elif start == "latest":
                consumer.seek_to_end([tp])
            else:
                consumer.seek(tp, int(start))
        elif args.topic:
            consumer.subscribe([args.topic])
        else:
            try:
                consumer.subscribe(re.compile(args.include))
            except re.error as exc:
                raise ToolError(f"Invalid --include regular expression '{args.include}': {exc}") from None
        timeout = None if args.timeout_ms is None else args.timeout_ms / 1000
        last = time.monotonic()
        limit = args.max_messages
        while (limit is None or count < limit) and not termination.requested:
            wait = 1.0 if timeout is None else max(0.0, min(1.0, last + timeout - time.monotonic()))
            records = consumer.poll(wait, max_records=None if limit is None else limit - count)
            if not records:
                if timeout is not None and time.monotonic() - last >= timeout:
                    print("Error processing message, terminating consumer process: TimeoutException",
                          file=sys.stderr)
                    break
                continue
            last = time.monotonic()
            for record in records:
                try:
                    out.write(formatter.format(record))
                except Exception as exc:
                    if not args.skip_message_on_error:
                        raise
                    print(f"Error processing message, skipping this message: {exc}", file=sys.stderr)
                count += 1
                if limit is not None and count >= limit:
                    break
            out.flush()
    except KeyboardInterrupt:
        pass
    finally:
        with contextlib.suppress(BrokenPipeError):
            out.flush()
        consumer.close()  # with a group: the client's final auto-commit of what was printed
        print(f"Processed a total of {count} messages", file=sys.stderr)
    return 0
