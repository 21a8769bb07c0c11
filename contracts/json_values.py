"""The first check every reader of a bus record makes: its value is a JSON object (anyone may write anything)."""

from __future__ import annotations

import json
from typing import Any


def parse_object(value: bytes | None) -> dict[str, Any]:
    """The JSON object ``value`` holds; ValueError saying what it is instead (no value, not JSON, not an object)."""
    if value is None:
        raise ValueError("no value")
    try:
        parsed = json.loads(value)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(parsed, dict):
        raise ValueError(f"not a JSON object: {type(parsed).__name__}")
    return parsed
