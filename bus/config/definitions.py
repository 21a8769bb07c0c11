"""Typed config keys, the way Kafka's `ConfigDef` declares them.

One declaration per key gives parsing, validation, defaults, documentation and the `config_type`
that DescribeConfigs reports, so the broker, the topic configs and the admin APIs never disagree.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any


class ConfigError(ValueError):
    """A config value that Kafka would reject; the message names the key and the reason."""


class ConfigType(enum.IntEnum):
    """DescribeConfigs `config_type` codes (KIP-569)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1


def _parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise ValueError("expected true or false")


def _parse_int(text: str) -> int:
    return int(text.strip())


def _parse_list(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


_PARSERS: dict[ConfigType, Callable[[str], Any]] = {
    ConfigType.BOOLEAN: _parse_bool,
    ConfigType.STRING: str.strip,
    ConfigType.INT: _parse_int,
    ConfigType.SHORT: _parse_int,
    ConfigType.LONG: _parse_int,
    ConfigType.DOUBLE: lambda text: float(text.strip()),
    ConfigType.LIST: _parse_list,
    ConfigType.CLASS: str.strip,
    ConfigType.PASSWORD: str,
}

_BOUNDS = {
    ConfigType.INT: (-(2**31), INT_MAX),
    ConfigType.SHORT: (-(2**15), 2**15 - 1),
    ConfigType.LONG: (-(2**63), LONG_MAX),
}


@dataclass(frozen=True, slots=True)
class ConfigKey:
    """One declared key. `default` is the string form, as Kafka documents it (None: no default)."""

    name: str
    type: ConfigType
    default: str | None
    doc: str
    at_least: float | None = None
    one_of: tuple[str, ...] | None = None
    read_only: bool = False
    sensitive: bool = False

    def parse(self, text: str) -> Any:
        """Parse and validate `text`, raising ConfigError with Kafka's wording on a bad value."""
        try:
            value = _PARSERS[self.type](text)
        except ValueError:
            raise ConfigError(
                f"Invalid value {text} for configuration {self.name}: "
                f"not a valid {self.type.name.lower()}"
            ) from None
        bounds = _BOUNDS.get(self.type)
        if bounds and not bounds[0] <= value <= bounds[1]:
            raise ConfigError(f"Invalid value {text} for configuration {self.name}: out of range")
        if self.at_least is not None and value < self.at_least:
            raise ConfigError(
                f"Invalid value {text} for configuration {self.name}: "
                f"Value must be at least {self.at_least:g}"
            )
        if self.one_of is not None:
            items = value if isinstance(value, list) else [value]
            bad = [item for item in items if item not in self.one_of]
            if bad or (self.type is ConfigType.LIST and not items):
                raise ConfigError(
                    f"Invalid value {text} for configuration {self.name}: "
                    f"String must be one of: {', '.join(self.one_of)}"
                )
        return value


class ConfigDef:
    """An ordered set of ConfigKeys with parse-all semantics."""

    def __init__(self, keys: Iterable[ConfigKey]) -> None:
        self.keys: dict[str, ConfigKey] = {key.name: key for key in keys}

    def __contains__(self, name: object) -> bool:
        return name in self.keys

    def __getitem__(self, name: str) -> ConfigKey:
        return self.keys[name]

    def parse(self, props: Mapping[str, str]) -> dict[str, Any]:
        """Parse every declared key present in `props` (unknown keys are the caller's concern)."""
        return {name: self.keys[name].parse(text) for name, text in props.items() if name in self.keys}

    def defaults(self) -> dict[str, str]:
        return {name: key.default for name, key in self.keys.items() if key.default is not None}
