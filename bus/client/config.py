"""Producer and consumer configuration with the Java client's names, defaults and validation.

Config is given as a dict of Java names (`{"bootstrap.servers": ..., "linger.ms": 5}`), as keyword
arguments with underscores (`bootstrap_servers=...`, the kafka-python habit), or both. Values may be
strings as in a .properties file. Bad values fail at construction with a ConfigError naming the key,
unknown keys are logged and ignored (as Java does), and the idempotence rules of KIP-679 apply:
idempotence is on by default and quietly turns off only when the user set a conflicting config without
asking for idempotence explicitly.

The security configs (`security.protocol`, `sasl.*`, `ssl.*`) are checked and resolved into a `ClientSecurity` by
`bus.client.security` when the client starts (the admin client, which takes its config loosely, shares that
check); the secret ones (passwords, keys, the JAAS line) are shown as `[hidden]` whenever a Config is printed, as
Kafka hides its PASSWORD configs.
"""

from __future__ import annotations

import importlib
import inspect
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from bus.client.errors import ConfigError
from bus.client.security import SECRET_KEYS, SSL_KEYS

log = logging.getLogger(__name__)

MAX_INT = 2**31 - 1


def load_object(spec: Any) -> Any:
    """A class, instance or callable given directly, or as "package.module:Name" / "package.module.Name"."""
    if not isinstance(spec, str):
        return spec
    module_name, sep, name = spec.partition(":")
    if not sep:
        module_name, _, name = spec.rpartition(".")
    try:
        return getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigError(f"cannot load {spec!r}: {exc}") from None


def instantiate(spec: Any) -> Any:
    """What an "obj" config names: a class is instantiated, anything else used as it is."""
    obj = load_object(spec)
    return obj() if isinstance(obj, type) else obj


def serde_function(spec: Any, method: str) -> Callable[[str, Any], Any] | None:
    """A (de)serializer config as a `(topic, data) -> data` function.

    `spec` is an object with `method` ("serialize" or "deserialize"), or a callable taking
    `(topic, data)` or just `data`.
    """
    if spec is None:
        return None
    obj = instantiate(spec)
    if hasattr(obj, method):
        return getattr(obj, method)
    if callable(obj):
        try:
            if len(inspect.signature(obj).parameters) == 1:
                return lambda _topic, data: obj(data)
        except (TypeError, ValueError):
            pass
        return obj
    kind = method.removesuffix("e") + "er"
    raise ConfigError(f"{kind} {spec!r} is neither callable nor has {method}()")


@dataclass(frozen=True, slots=True)
class ConfigKey:
    """One config: its type ("int", "bool", "str", "list", "obj", "float"), default and validator."""

    name: str
    type: str
    default: Any
    check: Callable[[Any], str | None] | None = None


def _at_least(low: int) -> Callable[[Any], str | None]:
    return lambda v: None if v >= low else f"must be at least {low}"


def _between(low: int, high: int) -> Callable[[Any], str | None]:
    return lambda v: None if low <= v <= high else f"must be in [{low}, {high}]"


def _one_of(*choices: str) -> Callable[[Any], str | None]:
    return lambda v: None if v in choices else f"must be one of {', '.join(choices)}"


def _optional_at_least(low: int) -> Callable[[Any], str | None]:
    return lambda v: None if v is None or v >= low else f"must be at least {low}"


_COMMON = [
    ConfigKey("bootstrap.servers", "list", None),
    ConfigKey("client.id", "str", ""),
    ConfigKey("client.rack", "str", ""),
    ConfigKey("request.timeout.ms", "int", 30000, _at_least(0)),
    ConfigKey("retry.backoff.ms", "int", 100, _at_least(0)),
    ConfigKey("retry.backoff.max.ms", "int", 1000, _at_least(0)),
    ConfigKey("reconnect.backoff.ms", "int", 50, _at_least(0)),
    ConfigKey("reconnect.backoff.max.ms", "int", 1000, _at_least(0)),
    ConfigKey("metadata.max.age.ms", "int", 300000, _at_least(0)),
    ConfigKey("socket.connection.setup.timeout.ms", "int", 10000, _at_least(0)),
    ConfigKey("connections.max.idle.ms", "int", 540000),
    ConfigKey("send.buffer.bytes", "int", 131072),
    ConfigKey("receive.buffer.bytes", "int", 32768),
    ConfigKey("security.protocol", "str", "PLAINTEXT"),  # values checked by bus.client.security
    ConfigKey("sasl.mechanism", "str", "GSSAPI"),
    ConfigKey("sasl.jaas.config", "str", None),
    ConfigKey("sasl.username", "str", None),  # librdkafka's names, so one config serves both clients
    ConfigKey("sasl.password", "str", None),
    *(ConfigKey(name, "list" if name in ("ssl.enabled.protocols", "ssl.cipher.suites") else "str", None)
      for name in SSL_KEYS),
    ConfigKey("interceptor.classes", "list", ()),
    ConfigKey("metric.reporters", "list", ()),
]

PRODUCER = {
    key.name: key
    for key in [
        *_COMMON,
        ConfigKey("acks", "str", "all", _one_of("all", "-1", "0", "1")),
        ConfigKey("batch.size", "int", 16384, _at_least(0)),
        ConfigKey("linger.ms", "int", 5, _at_least(0)),
        ConfigKey("buffer.memory", "int", 33554432, _at_least(0)),
        ConfigKey("max.block.ms", "int", 60000, _at_least(0)),
        ConfigKey("max.request.size", "int", 1048576, _at_least(0)),
        ConfigKey("retries", "int", MAX_INT, _at_least(0)),
        ConfigKey("delivery.timeout.ms", "int", 120000, _at_least(0)),
        ConfigKey("max.in.flight.requests.per.connection", "int", 5, _at_least(1)),
        ConfigKey("enable.idempotence", "bool", True),
        ConfigKey("compression.type", "str", "none", _one_of("none", "gzip", "snappy", "lz4", "zstd")),
        ConfigKey("compression.gzip.level", "int", -1),
        ConfigKey("compression.lz4.level", "int", 9),
        ConfigKey("compression.zstd.level", "int", 3),
        ConfigKey("key.serializer", "obj", None),
        ConfigKey("value.serializer", "obj", None),
        ConfigKey("partitioner.class", "obj", None),
        ConfigKey("partitioner.ignore.keys", "bool", False),
        ConfigKey("partitioner.adaptive.partitioning.enable", "bool", True),
        ConfigKey("partitioner.availability.timeout.ms", "int", 0, _at_least(0)),
        ConfigKey("transactional.id", "str", None),
        ConfigKey("transaction.timeout.ms", "int", 60000, _at_least(1)),
        ConfigKey("metadata.max.idle.ms", "int", 300000, _at_least(5000)),
    ]
}

CONSUMER = {
    key.name: key
    for key in [
        *_COMMON,
        ConfigKey("group.id", "str", None),
        ConfigKey("group.instance.id", "str", None),
        ConfigKey("group.protocol", "str", "classic", _one_of("classic")),
        ConfigKey("session.timeout.ms", "int", 45000, _at_least(1)),
        ConfigKey("heartbeat.interval.ms", "int", 3000, _at_least(1)),
        ConfigKey("max.poll.interval.ms", "int", 300000, _at_least(1)),
        ConfigKey("max.poll.records", "int", 500, _at_least(1)),
        ConfigKey("enable.auto.commit", "bool", True),
        ConfigKey("auto.commit.interval.ms", "int", 5000, _at_least(0)),
        ConfigKey("auto.offset.reset", "str", "latest", _one_of("earliest", "latest", "none")),
        ConfigKey("fetch.min.bytes", "int", 1, _at_least(0)),
        ConfigKey("fetch.max.bytes", "int", 52428800, _at_least(0)),
        ConfigKey("fetch.max.wait.ms", "int", 500, _at_least(0)),
        ConfigKey("max.partition.fetch.bytes", "int", 1048576, _at_least(0)),
        ConfigKey("isolation.level", "str", "read_uncommitted", _one_of("read_uncommitted", "read_committed")),
        ConfigKey("partition.assignment.strategy", "list", ("range", "cooperative-sticky")),
        ConfigKey("default.api.timeout.ms", "int", 60000, _at_least(0)),
        ConfigKey("key.deserializer", "obj", None),
        ConfigKey("value.deserializer", "obj", None),
        ConfigKey("exclude.internal.topics", "bool", True),
        ConfigKey("allow.auto.create.topics", "bool", True),
        ConfigKey("check.crcs", "bool", True),
    ]
}

# Keys that Python callers often spell differently; mapped to the Java names.
_ALIASES = {"bootstrap_servers": "bootstrap.servers", "group_id": "group.id", "client_id": "client.id"}


class Config(Mapping[str, Any]):
    """Resolved values by Java name; `explicit` holds the names the user set."""

    def __init__(self, values: dict[str, Any], explicit: frozenset[str]) -> None:
        self._values = values
        self.explicit = explicit

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __iter__(self) -> Any:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        shown = {k: "[hidden]" if k in SECRET_KEYS and v is not None else v for k, v in self._values.items()}
        return f"Config({shown!r})"


def _normalise_name(name: str) -> str:
    return _ALIASES.get(name, name.replace("_", "."))


def _coerce(key: ConfigKey, value: Any) -> Any:
    if value is None:
        return None
    kind = key.type
    try:
        if kind == "int":
            if isinstance(value, bool):
                raise TypeError("a bool is not an int")
            return int(value)
        if kind == "float":
            return float(value)
        if kind == "bool":
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.strip().lower() in ("true", "false"):
                return value.strip().lower() == "true"
            raise TypeError(f"expected true or false, got {value!r}")
        if kind == "str":
            return str(value)
        if kind == "list":
            if isinstance(value, str):
                return tuple(item.strip() for item in value.split(",") if item.strip())
            if isinstance(value, Iterable):
                return tuple(value)
            return (value,)
        return value
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"invalid value {value!r} for configuration {key.name}: {exc}") from None


def resolve(definitions: Mapping[str, ConfigKey], config: Mapping[str, Any] | None,
            kwargs: Mapping[str, Any]) -> Config:
    """Merge a Java-style dict and keyword arguments over the defaults, typed and validated."""
    given: dict[str, Any] = {}
    for source in (config or {}, kwargs):
        for name, value in source.items():
            given[name if name in definitions else _normalise_name(name)] = value
    values: dict[str, Any] = {}
    for name, key in definitions.items():
        value = _coerce(key, given[name]) if name in given else key.default
        if value is not None and key.check is not None:
            problem = key.check(value)
            if problem:
                raise ConfigError(f"invalid value {value!r} for configuration {name}: {problem}")
        values[name] = value
    unknown = sorted(set(given) - set(definitions))
    for name in unknown:
        log.warning("the configuration '%s' was supplied but isn't a known config", name)
    if not values["bootstrap.servers"]:
        raise ConfigError("bootstrap.servers is required (host:port[,host:port...])")
    return Config(values, frozenset(name for name in given if name in definitions))


def producer_config(config: Mapping[str, Any] | None = None, **kwargs: Any) -> Config:
    """Resolve producer config, then apply Kafka's cross-config rules (idempotence, delivery timeout)."""
    resolved = resolve(PRODUCER, config, kwargs)
    values = dict(resolved)
    explicit = resolved.explicit
    acks = {"all": -1, "-1": -1, "0": 0, "1": 1}[values["acks"]]
    values["acks"] = acks
    conflicts = []
    if acks != -1:
        conflicts.append(f"acks must be all (got {values['acks']})")
    if values["retries"] == 0:
        conflicts.append("retries must be greater than 0")
    if values["max.in.flight.requests.per.connection"] > 5:
        conflicts.append("max.in.flight.requests.per.connection must be at most 5")
    if values["enable.idempotence"] and conflicts:
        if "enable.idempotence" in explicit or values["transactional.id"]:
            raise ConfigError("enable.idempotence requires " + "; ".join(conflicts))
        values["enable.idempotence"] = False  # KIP-679: implicit default yields to explicit configs
    if values["transactional.id"] and not values["enable.idempotence"]:
        raise ConfigError("transactional.id requires enable.idempotence")
    floor = values["linger.ms"] + values["request.timeout.ms"]
    if values["delivery.timeout.ms"] < floor:
        if "delivery.timeout.ms" in explicit:
            raise ConfigError(f"delivery.timeout.ms should be equal to or larger than linger.ms + "
                              f"request.timeout.ms ({floor})")
        values["delivery.timeout.ms"] = floor
    return Config(values, explicit)


def consumer_config(config: Mapping[str, Any] | None = None, **kwargs: Any) -> Config:
    """Resolve consumer config; heartbeats must come well inside the session timeout."""
    resolved = resolve(CONSUMER, config, kwargs)
    values = dict(resolved)
    if values["heartbeat.interval.ms"] >= values["session.timeout.ms"]:
        raise ConfigError("heartbeat.interval.ms must be lower than session.timeout.ms")
    if values["group.id"] is None and values["enable.auto.commit"] and "enable.auto.commit" in resolved.explicit:
        raise ConfigError("enable.auto.commit cannot be true without a group.id")
    return Config(values, resolved.explicit)


def bootstrap_addresses(servers: Iterable[str]) -> list[tuple[str, int]]:
    """Parse "host:port" entries (IPv6 as "[::1]:9092"); a missing port means 9092."""
    out = []
    for server in servers:
        text = server.strip()
        if "://" in text:
            text = text.split("://", 1)[1]
        if text.startswith("["):
            host, _, rest = text[1:].partition("]")
            port = rest.lstrip(":") or "9092"
        elif ":" in text:
            host, _, port = text.rpartition(":")
        else:
            host, port = text, "9092"
        try:
            out.append((host, int(port)))
        except ValueError:
            raise ConfigError(f"invalid bootstrap server {server!r}") from None
    return out
