"""Alertmanager's label matchers (``name="v"``, ``!=``, ``=~``, ``!~``): silences and inhibition use them.

Regular expressions are anchored as Alertmanager anchors them (``^(?:re)$``), and a label that is
absent matches as the empty string, so ``device_ip=""`` selects alerts without a device.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

_MATCHER = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*')


@dataclass(frozen=True)
class Matcher:
    name: str
    value: str
    is_regex: bool = False
    is_equal: bool = True

    def __post_init__(self) -> None:
        if self.is_regex:
            try:
                re.compile(self.value)
            except re.error as exc:
                raise ValueError(f"bad regular expression {self.value!r}: {exc}") from None

    def matches(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.name, "")
        hit = re.fullmatch(self.value, value) is not None if self.is_regex else value == self.value
        return hit if self.is_equal else not hit

    def to_json(self) -> dict[str, Any]:
        """Alertmanager API v2's matcher object."""
        return {"name": self.name, "value": self.value, "isRegex": self.is_regex, "isEqual": self.is_equal}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Matcher:
        if not isinstance(data, Mapping) or not isinstance(data.get("name"), str) or not isinstance(
                data.get("value"), str):
            raise ValueError(f"a matcher needs string name and value: {data!r}")
        return cls(data["name"], data["value"], bool(data.get("isRegex", False)), bool(data.get("isEqual", True)))

    @classmethod
    def parse(cls, text: str) -> Matcher:
        """``alertname="DeviceSilent"`` etc., as in Alertmanager's ``source_matchers``."""
        found = _MATCHER.fullmatch(text) if isinstance(text, str) else None
        if found is None:
            raise ValueError(f'not a matcher (name="value", name!="v", name=~"re", name!~"re"): {text!r}')
        name, op, raw = found.groups()
        value = re.sub(r"\\(.)", r"\1", raw)
        return cls(name, value, is_regex=op in ("=~", "!~"), is_equal=op in ("=", "=~"))


def all_match(matchers: Iterable[Matcher], labels: Mapping[str, str]) -> bool:
    return all(m.matches(labels) for m in matchers)
