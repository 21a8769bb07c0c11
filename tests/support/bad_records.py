"""Records no producer of ours writes, for the tests that feed them to the Spark jobs.

Any producer may write to a topic a job reads, so each job must set such a record aside (a dead letter, or a
counted skip with the reason in its log) and go on: :data:`MALFORMED` is what every topic gets, each test adds
the valid-looking records its own topics' readers must refuse. :func:`wait_for` fails as soon as a micro-batch of
the job has failed, so a test run against a job that still dies on a bad record fails in seconds, not at its deadline.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

MALFORMED: dict[str, bytes | None] = {
    "null value": None,
    "garbage bytes": b"\xff\xfe\x00\x9c not JSON at all",
    "a JSON list": b"[1, 2, 3]",
    "a JSON number": b"42",
    "a JSON string": b'"text"',
    "an object of unrelated keys": b'{"unrelated": true, "n": 1}',
    "nesting too deep to decode": b"[" * 5000 + b"]" * 5000,
    "an int over Python's digit limit": b'{"n": ' + b"7" * 5000 + b"}",
}
BATCH_FAILED = "FOREACH_BATCH_USER_FUNCTION_ERROR"
"""What Spark logs when a micro-batch's function raised (the query fails; a query that died starting up, as on a
loaded machine, fails otherwise, and the jobs start it again: not a failure here)."""


def lone_surrogate(record: dict[str, Any], field: str) -> bytes:
    """``record`` with ``field`` set to JSON's ``"\\ud800"``: valid JSON that decodes to text UTF-8 cannot carry."""
    return json.dumps({**record, field: "\ud800"}).encode()


def nested(depth: int) -> list[Any]:
    """A list nested ``depth`` deep (decodes, but deeper than any record of ours)."""
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value


def produce(bootstrap: str, topic: str, values: Iterable[bytes | None], key: bytes | None = None,
            timestamp: int = 0) -> None:
    """Produce ``values`` in order and wait until all are acknowledged (``timestamp``: CreateTime in ms, 0: now). Values
    up to the broker's limit (1 MiB) go: librdkafka's own default stops at 1,000,000 bytes, Java's does not."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "message.max.bytes": 1 << 20})
    for value in values:
        producer.produce(topic, value=value, key=key, timestamp=timestamp)
    assert producer.flush(30) == 0


def wait_for(condition: Callable[[], bool], what: str, timeout: float, log: Path,
             alive: Callable[[], bool]) -> None:
    """Poll ``condition``; fail at once when the job exited or a micro-batch failed (see the module docstring)."""
    deadline = time.monotonic() + timeout
    while not condition():
        text = log.read_text(errors="replace")
        assert BATCH_FAILED not in text and alive(), f"the job failed waiting for {what}:\n{text[-6000:]}"
        assert time.monotonic() < deadline, f"{what}: not within {timeout}s:\n{text[-4000:]}"
        time.sleep(0.5)
