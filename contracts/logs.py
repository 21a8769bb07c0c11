"""One log format for every long-running process of the solution, so an operations centre ships and searches them
all the same way.

JSON, one object per line on stderr: `time` (UTC, ms), `level`, `service` (which process: `bus`, `monitor`,
`console` ...), `logger`, `message`, then the record's context fields, the `extra={...}` of the call (`topic`,
`partition`, `device_ip`, `task_id` ...), and `exc` with a traceback. Or, for a person at a terminal, the same on one
readable line: `2026-11-29T12:00:00.123Z INFO monitor monitoring.engine: message topic=capture.vehicle`.
`--log-format auto` (the default) picks text on a terminal and JSON otherwise (a log file, a container's stdout).

No secret and no personal datum (a plate, a face feature) is logged at INFO or above: log the record id or the
watch id, never the value.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from typing import Any

FORMATS = ("auto", "json", "text")
# Attributes every LogRecord has; anything else on a record came from `extra=`.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "taskName"}


def _timestamp(record: logging.LogRecord) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z"


def _context(record: logging.LogRecord) -> dict[str, Any]:
    """The record's `extra=` fields, as JSON can hold them."""
    return {key: value if isinstance(value, int | float | bool | str | None) else str(value)
            for key, value in vars(record).items() if key not in _STANDARD and not key.startswith("_")}


class JsonFormatter(logging.Formatter):
    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {"time": _timestamp(record), "level": record.levelname, "service": self.service,
                                 "logger": record.name, "message": record.getMessage(), **_context(record)}
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        context = "".join(f" {key}={value}" for key, value in _context(record).items())
        line = f"{_timestamp(record)} {record.levelname} {self.service} {record.name}: {record.getMessage()}{context}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def setup(service: str, fmt: str = "auto", level: int | str = logging.INFO) -> None:
    """Log every logger of this process to stderr in `fmt` (auto: text on a terminal, else JSON) as `service`."""
    if fmt not in FORMATS:
        raise ValueError(f"log format {fmt!r}: one of {', '.join(FORMATS)}")
    handler = logging.StreamHandler(sys.stderr)
    text = fmt == "text" or (fmt == "auto" and sys.stderr.isatty())
    handler.setFormatter(TextFormatter(service) if text else JsonFormatter(service))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper() if isinstance(level, str) else level)


def add_log_flags(parser: argparse.ArgumentParser, *, level: bool = True) -> None:
    """`--log-format` (and `--log-level`) as every process of the solution takes them."""
    parser.add_argument("--log-format", choices=FORMATS, default="auto",
                        help="log lines on stderr: json, text, or auto (text on a terminal, else json)")
    if level:
        parser.add_argument("--log-level", choices=("DEBUG", "INFO", "WARNING", "ERROR"), default="INFO")
