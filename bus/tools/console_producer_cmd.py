"""`bus console-producer`: read lines from stdin and send each as a record, like kafka-console-producer.sh.

Lines are parsed exactly as Kafka's LineMessageReader does: with `parse.headers=true` a line starts
with `h1:v1,h2:v2` then `headers.delimiter` (tab); with `parse.key=true` the key comes next, ended by
`key.separator` (tab); the rest is the value; a field equal to `null.marker` is null. A line that
lacks a separator fails the command (exit 1) unless `ignore.error=true`. Records go through our
native `KafkaProducer`, configured with `--producer-property` / `--producer.config` in Java's names.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import sys
import threading
from dataclasses import dataclass
from typing import Any

from bus.tools._common import ToolError, add_connection_args, load_client_config, parse_key_values, run_guarded

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def add_parser(sub: argparse._SubParsersAction, name: str) -> None:
    p = sub.add_parser(name, help="Send lines from stdin as records (kafka-console-producer).",
                       description="This tool helps to read data from standard input and publish it to Kafka.")
    add_connection_args(p, config_help="Producer config properties file. Note that --producer-property takes "
                                       "precedence.", config_aliases=("--producer.config",))
    p.add_argument("--topic", required=True, help="REQUIRED: The topic id to produce messages to.")
    p.add_argument("--property", "--reader-property", dest="property", action="extend", nargs="+", metavar="PROP=VALUE",
                   help="Line reader properties: parse.key, key.separator, parse.headers, headers.delimiter, "
                        "headers.separator, headers.key.separator, ignore.error, null.marker (repeatable).")
    p.add_argument("--producer-property", action="extend", nargs="+", metavar="PROP=VALUE",
                   help="A mechanism to pass user-defined properties in the form key=value to the producer.")
    p.add_argument("--compression-codec", nargs="?", const="gzip", metavar="CODEC",
                   help="The compression codec: either 'none', 'gzip', 'snappy', 'lz4', or 'zstd'. If specified "
                        "without value, then it defaults to 'gzip'.")
    p.add_argument("--sync", action="store_true", help="If set, message send requests to the brokers are sent "
                                                       "synchronously, one at a time as they arrive.")
    p.add_argument("--request-required-acks", metavar="ACKS", help="The required acks of the producer requests "
                                                                   "(default: -1).")
    p.add_argument("--batch-size", type=int, metavar="BYTES", help="Number of bytes to batch in a single request.")
    p.add_argument("--timeout", type=int, metavar="MS", help="linger.ms: how long a batch may wait to fill "
                                                             "(default: 1000).")
    p.add_argument("--max-block-ms", type=int, metavar="MS",
                   help="The max time that the producer will block for during a send request (default: 60000).")
    p.add_argument("--request-timeout-ms", type=int, metavar="MS",
                   help="The ack timeout of the producer requests (default: 1500).")
    p.add_argument("--message-send-max-retries", type=int, metavar="N", help="retries (default: 2147483647).")
    p.add_argument("--retry-backoff-ms", type=int, metavar="MS", help="Backoff before a retry (default: 100).")
    p.set_defaults(run=run, parser=p)


@dataclass(slots=True)
class LineReader:
    """Kafka's LineMessageReader: headers, key and value out of one line."""

    parse_key: bool = False
    key_separator: str = "\t"
    parse_headers: bool = False
    headers_delimiter: str = "\t"
    headers_separator: str = ","
    headers_key_separator: str = ":"
    ignore_error: bool = False
    null_marker: str | None = None

    @classmethod
    def from_properties(cls, props: dict[str, str]) -> LineReader:
        def flag(name: str) -> bool:
            return props.get(name, "false").strip().lower() == "true"

        reader = cls(parse_key=flag("parse.key"), key_separator=props.get("key.separator", "\t"),
                     parse_headers=flag("parse.headers"), headers_delimiter=props.get("headers.delimiter", "\t"),
                     headers_separator=props.get("headers.separator", ","),
                     headers_key_separator=props.get("headers.key.separator", ":"),
                     ignore_error=flag("ignore.error"), null_marker=props.get("null.marker"))
        pairs = [("headers.delimiter", reader.headers_delimiter, "headers.separator", reader.headers_separator),
                 ("headers.delimiter", reader.headers_delimiter, "headers.key.separator",
                  reader.headers_key_separator),
                 ("headers.separator", reader.headers_separator, "headers.key.separator",
                  reader.headers_key_separator)]
        for a, va, b, vb in pairs:
            if va == vb:
                raise ToolError(f"{a} and {b} may not be equal")
        if reader.null_marker is not None:
            for name, value in (("key.separator", reader.key_separator), ("headers.separator",
                                reader.headers_separator), ("headers.delimiter", reader.headers_delimiter),
                                ("headers.key.separator", reader.headers_key_separator)):
                if value == reader.null_marker:
                    raise ToolError(f"null.marker and {name} may not be equal")
        return reader

    def _cut(self, enabled: bool, line: str, start: int, mark: str, what: str, number: int) -> str | None:
        if not enabled:
            return None
        index = line.find(mark, start)
        if index == -1:
            if self.ignore_error:
                return None
            raise ToolError(f"No {what} found on line number {number}: '{line}'")
        return line[start:index]

    def parse(self, line: str, number: int) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]:
        """(key, value, headers) of one input line (without its newline)."""
        headers_text = self._cut(self.parse_headers, line, 0, self.headers_delimiter, "headers delimiter", number)
        offset = 0 if headers_text is None else len(headers_text) + len(self.headers_delimiter)
        key = self._cut(self.parse_key, line, offset, self.key_separator, "key separator", number)
        offset += 0 if key is None else len(key) + len(self.key_separator)
        value = line[offset:]
        headers: list[tuple[str, bytes | None]] = []
        if headers_text is not None and headers_text != self.null_marker:
            for pair in re.split(self.headers_separator, headers_text):
                index = pair.find(self.headers_key_separator)
                if index == -1:
                    if self.ignore_error:
                        headers.append((pair, None))
                        continue
                    raise ToolError(f"No header key separator found in pair '{pair}' on line number {number}")
                header_key = pair[:index]
                if header_key == self.null_marker:
                    raise ToolError(f"Header keys should not be equal to the null marker '{self.null_marker}' as "
                                    "they can't be null")
                header_value = pair[index + len(self.headers_key_separator):]
                headers.append((header_key, None if header_value == self.null_marker else header_value.encode()))
        return (None if key is None or key == self.null_marker else key.encode(),
                None if value == self.null_marker else value.encode(), headers)


def producer_settings(args: argparse.Namespace) -> dict[str, Any]:
    """Java producer config: Kafka's console-producer defaults, then the file, then --producer-property."""
    extra: dict[str, Any] = {"linger.ms": 1000, "request.timeout.ms": 1500, "client.id": "console-producer"}
    if args.compression_codec is not None:
        if args.compression_codec not in CODECS:
            raise ToolError(f"Unknown compression codec '{args.compression_codec}': expected one of "
                            + ", ".join(CODECS))
        extra["compression.type"] = args.compression_codec
    flags = {"acks": args.request_required_acks, "batch.size": args.batch_size, "linger.ms": args.timeout,
             "max.block.ms": args.max_block_ms, "request.timeout.ms": args.request_timeout_ms,
             "retries": args.message_send_max_retries, "retry.backoff.ms": args.retry_backoff_ms}
    extra.update({k: v for k, v in flags.items() if v is not None})
    conf = load_client_config(args, extra)
    conf.update(parse_key_values(args.producer_property, "producer property"))
    if args.sync:
        conf["linger.ms"] = 0
    if str(conf.get("acks")) == "-1":
        conf["acks"] = "all"
    return conf


def run(args: argparse.Namespace) -> int:
    return run_guarded("console producer", lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    from bus.client.errors import KafkaError
    from bus.client.producer import KafkaProducer
    from bus.tools._common import check_reachable

    reader = LineReader.from_properties(parse_key_values(args.property, "property"))
    conf = producer_settings(args)
    check_reachable(conf)
    failures: list[str] = []
    lock = threading.Lock()

    def logged(topic: str, key: bytes | None, value: bytes | None) -> Any:
        def callback(_metadata: Any, exc: Exception | None) -> None:
            if exc is not None:
                with lock:
                    failures.append(str(exc))
                shown_key = "null" if key is None else key.decode(errors="replace")
                size = -1 if value is None else len(value)
                print(f"Error when sending message to topic {topic} with key: {shown_key}, value: {size} bytes with "
                      f"error: {exc}", file=sys.stderr)

        return callback

    try:
        producer = KafkaProducer(conf)
    except KafkaError as exc:
        raise ToolError(f"Invalid producer configuration: {exc}") from None
    prompt = sys.stdin.isatty()
    try:
        number = 0
        while True:
            if prompt:
                print(">", end="", flush=True)
            raw = sys.stdin.buffer.readline()
            if not raw:
                break
            number += 1
            line = raw.decode("utf-8", errors="replace").rstrip("\n").removesuffix("\r")
            key, value, headers = reader.parse(line, number)
            try:
                future = producer.send(args.topic, value=value, key=key, headers=headers or None,
                                       callback=logged(args.topic, key, value))
            except KafkaError as exc:
                raise ToolError(f"Error when sending message to topic {args.topic}: {exc}") from None
            if args.sync:
                with contextlib.suppress(Exception):  # a failure was already reported by the callback
                    future.get()
    finally:
        producer.close()
    return 1 if failures else 0
