"""The configs one listener sees: `listener.name.<listener>.<key>` beats `<key>`, as in Kafka.

Kafka builds each listener's channel from `valuesWithPrefixOverride("listener.name.<listener lower-case>.")`:
a prefixed key overrides the plain one, and per-mechanism SASL keys (`listener.name.sasl_ssl.scram-sha-512.
sasl.jaas.config`) appear under their mechanism-prefixed name (`scram-sha-512.sasl.jaas.config`). Errors name
the key the operator actually wrote, prefixed or not, so a bad value is found in the file at once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

from bus.config.broker import BROKER_CONFIGS

LISTENER_PREFIX = "listener.name."


class ConfigView(Mapping[str, str]):
    """Raw config strings by key, remembering which key of the original props gave each value."""

    def __init__(self, values: Mapping[str, str], sources: Mapping[str, str] | None = None, prefix: str = "") -> None:
        """`sources`: keys that came from a prefixed key, and that key; `prefix`: `listener.name.<listener>.`."""
        self._values = dict(values)
        self._sources = dict(sources or {})
        self.prefix = prefix

    def __getitem__(self, key: str) -> str:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def source(self, key: str) -> str:
        """The key as written in the original props (`listener.name.ssl.ssl.client.auth` or `ssl.client.auth`)."""
        return self._sources.get(key, key)

    def overridden(self, key: str) -> bool:
        """Whether `key` came from a listener-prefixed key (Kafka applies some keys to SASL_SSL only then)."""
        return key in self._sources

    def value(self, key: str) -> Any:
        """`key` parsed and validated by its broker ConfigKey, its default when unset; errors name the source key."""
        definition = BROKER_CONFIGS[key]
        text = self._values.get(key, definition.default)
        if text is None:
            return None
        return dataclasses.replace(definition, name=self.source(key)).parse(text)


def listener_config(props: Mapping[str, str], listener_name: str) -> ConfigView:
    """`props` as listener `listener_name` sees them: every `listener.name.<name lower-case>.<key>` overrides `<key>`.

    Only the lower-case listener name matches, as Kafka's `ListenerName.configPrefix` builds it.
    """
    prefix = f"{LISTENER_PREFIX}{listener_name.lower()}."
    values = {key: value for key, value in props.items() if not key.startswith(LISTENER_PREFIX)}
    sources: dict[str, str] = {}
    for key, value in props.items():
        if key.startswith(prefix) and len(key) > len(prefix):
            values[key[len(prefix):]] = value
            sources[key[len(prefix):]] = key
    return ConfigView(values, sources, prefix)
