"""What every consumer of the monitor sets aside: a record that is not a JSON object, lacks what its topic's records
have, or is dated too far ahead (``monitor_records_malformed_total{topic, reason}``). The monitor's own loop, its
capture-image sampler and its footage watch share these checks, so one record is judged alike wherever it is read.
"""

from __future__ import annotations

import json
from typing import Any

from contracts.records import parse_time

UNDECODABLE, NOT_OBJECT, INVALID, FUTURE, ERROR = "undecodable", "not_object", "invalid", "future", "error"
"""Why a record was set aside: not JSON; JSON but not an object (or no value at all); an object without the
fields its topic's records have; dated too far ahead; anything else that went wrong taking it."""
MAX_AHEAD_S = 60.0
"""A record dated further ahead of this host's clock is set aside: one heartbeat stamped tomorrow would make every
real heartbeat of its device look like a replay until then, one batch stamped tomorrow would empty every window."""


class MalformedRecord(ValueError):
    """A record to set aside; ``reason`` is one of the reasons above, the message says what is wrong."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def decode_object(raw: bytes | None) -> dict[str, Any]:
    if raw is None:
        raise MalformedRecord(NOT_OBJECT, "no value")
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # bad UTF-8 or JSON, an int over Python's digit limit, deep nesting
        raise MalformedRecord(UNDECODABLE, f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise MalformedRecord(NOT_OBJECT, f"not a JSON object but {type(value).__name__}")
    return value


def record_time(text: Any, now: float) -> float:
    """A record's time in epoch seconds; refused when it is no time or lies more than ``MAX_AHEAD_S`` ahead."""
    try:
        t = parse_time(text).timestamp()
    except (ValueError, TypeError, OverflowError) as exc:
        raise MalformedRecord(INVALID, f"bad time {text!r}: {exc}") from None
    if t > now + MAX_AHEAD_S:
        raise MalformedRecord(FUTURE, f"time {text} is {t - now:.0f} s ahead of this host's clock")
    return t
