"""The mirror's settings: MirrorMaker 2's `mm2.properties` keys, the book-era MirrorMaker flags, and the
solution config's defaults (data topics in, control topics out, [bus] -> [dr]).

Key resolution follows MM2's dedicated mode: a flow key `<source>-><target>.<key>` beats a top-level
`<key>`; how every client of a cluster connects comes from its cluster keys (`<alias>.bootstrap.servers`,
`<alias>.security.protocol`, `<alias>.sasl.*`, `<alias>.ssl.*`), the tuning of its clients from
`<alias>.consumer.*` / `<alias>.producer.*` / `<alias>.admin.*` and Connect's `producer.override.*` /
`consumer.override.*` (flow-prefixed or not). Anything malformed raises SettingsError naming the key, so
start-up stops before any data moves.

A file holding a secret (a SASL login, a key store password) must be readable by its owner only: one open
to others stops the mirror, and no secret is ever logged or shown in a repr.
"""

from __future__ import annotations

import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from bus.client.security import SECRET_KEYS
from bus.config.properties import PropertiesError, load_properties
from contracts import bus_client
from contracts.config import Config
from contracts.topics import Topics

IDENTITY_POLICY = "org.apache.kafka.connect.mirror.IdentityReplicationPolicy"
DEFAULT_POLICY = "org.apache.kafka.connect.mirror.DefaultReplicationPolicy"
# MM2's defaults for what is never a topic or group to mirror (internal topics, other tools' groups).
DEFAULT_TOPICS_EXCLUDE = (r".*[\-\.]internal", r".*\.replica", r"__.*")
DEFAULT_GROUPS_EXCLUDE = (r"console-consumer-.*", r"connect-.*", r"__.*")


class SettingsError(ValueError):
    """A setting that cannot be used; the message names the key."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{key}: {problem}")
        self.key = key


@dataclass(frozen=True)
class Settings:
    source: str
    target: str
    source_cluster: dict[str, str] = field(repr=False)
    """How the source's clients (data consumer, admin, offset syncs and checkpoints reading it) connect, in
    Kafka's (Java) keys: `bootstrap.servers` and the security settings (SECRET: never logged)."""
    target_cluster: dict[str, str] = field(repr=False)
    """The same for the target's clients (data producer, admin, checkpoints producer)."""
    topics: tuple[str, ...]
    topics_exclude: tuple[str, ...]
    groups: tuple[str, ...] = (".*",)
    groups_exclude: tuple[str, ...] = DEFAULT_GROUPS_EXCLUDE
    replication_policy: str = IDENTITY_POLICY
    separator: str = "."
    tasks: int = 1
    sync_group_offsets: bool = False
    emit_checkpoints: bool = True
    emit_checkpoints_interval: float = 5.0
    sync_group_offsets_interval: float = 5.0
    refresh_topics_interval: float = 5.0
    refresh_groups_interval: float = 10.0
    sync_topic_configs: bool = True
    sync_topic_configs_interval: float = 60.0
    delete_topics: bool = False
    replication_factor: int = -1
    offset_syncs_replication_factor: int = -1
    checkpoints_replication_factor: int = -1
    offset_syncs_location: str = "source"
    consumer: dict[str, str] = field(default_factory=dict, repr=False)
    producer: dict[str, str] = field(default_factory=dict, repr=False)
    metrics_port: int | None = None

    def __post_init__(self) -> None:
        for key, patterns in (("topics", self.topics), ("topics.exclude", self.topics_exclude),
                              ("groups", self.groups), ("groups.exclude", self.groups_exclude)):
            for pattern in patterns:
                try:
                    re.compile(pattern)
                except re.error as exc:
                    raise SettingsError(key, f"invalid regex {pattern!r}: {exc}") from None

    @property
    def source_bootstrap(self) -> str:
        return self.source_cluster["bootstrap.servers"]

    @property
    def target_bootstrap(self) -> str:
        return self.target_cluster["bootstrap.servers"]

    # -- names ----------------------------------------------------------------------------------

    def target_topic(self, topic: str) -> str:
        """The replication policy's name for a source topic on the target."""
        if self.replication_policy == IDENTITY_POLICY:
            return topic
        return f"{self.source}{self.separator}{topic}"

    @property
    def offset_syncs_topic(self) -> str:
        return f"mm2-offset-syncs.{self.target}.internal"

    @property
    def checkpoints_topic(self) -> str:
        return f"{self.source}.checkpoints.internal"

    def mirrors_topic(self, topic: str) -> bool:
        """Include list matches and exclude list does not (regexes match whole names, as Java's matches())."""
        return (any(re.fullmatch(p, topic) for p in self.topics)
                and not any(re.fullmatch(p, topic) for p in self.topics_exclude))

    def mirrors_group(self, group: str) -> bool:
        return (any(re.fullmatch(p, group) for p in self.groups)
                and not any(re.fullmatch(p, group) for p in self.groups_exclude))

    # -- client settings ------------------------------------------------------------------------

    def consumer_int(self, key: str, default: int) -> int:
        return _int(self.consumer, key, default)

    def producer_int(self, key: str, default: int) -> int:
        return _int(self.producer, key, default)


def _int(props: Mapping[str, str], key: str, default: int) -> int:
    value = props.get(key)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        raise SettingsError(key, f"expected an integer, got {value!r}") from None


def _list(value: str) -> tuple[str, ...]:
    """MM2's list syntax: comma-separated, blanks trimmed."""
    return tuple(item.strip() for item in value.split(",") if item.strip())


def _bool(key: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered not in ("true", "false"):
        raise SettingsError(key, f"expected true or false, got {value!r}")
    return lowered == "true"


def _seconds(key: str, value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        raise SettingsError(key, f"expected a number of seconds, got {value!r}") from None
    if seconds <= 0:
        raise SettingsError(key, f"must be positive, got {value!r}")
    return seconds


def _whole(key: str, value: str, low: int) -> int:
    try:
        number = int(value)
    except ValueError:
        raise SettingsError(key, f"expected an integer, got {value!r}") from None
    if number < low:
        raise SettingsError(key, f"must be at least {low}, got {number}")
    return number


def defaults_from(solution: Config) -> dict[str, str]:
    """The solution config's part: the two sites' buses as the `mirror` principal reaches them (`source.*` from
    [bus], `target.*` from [dr]: a secret among them when a bus is secured), data topics included, control
    excluded."""
    topics = Topics.from_config(solution)
    return {
        **{f"source.{key}": value for key, value in bus_client.java(solution, "mirror").items()},
        **{f"target.{key}": value for key, value in bus_client.java(solution, "mirror", section=bus_client.DR).items()},
        "topics": ",".join(re.escape(t) for t in topics.data()),
        "topics.exclude": ",".join([*DEFAULT_TOPICS_EXCLUDE, *(re.escape(t) for t in topics.control())]),
    }


# Keys of ours or MM2's that take a value of a given kind: (settings field, parser).
_SECONDS = {
    "emit.checkpoints.interval.seconds": "emit_checkpoints_interval",
    "sync.group.offsets.interval.seconds": "sync_group_offsets_interval",
    "refresh.topics.interval.seconds": "refresh_topics_interval",
    "refresh.groups.interval.seconds": "refresh_groups_interval",
    "sync.topic.configs.interval.seconds": "sync_topic_configs_interval",
}
_BOOLS = {
    "sync.group.offsets.enabled": "sync_group_offsets",
    "emit.checkpoints.enabled": "emit_checkpoints",
    "sync.topic.configs.enabled": "sync_topic_configs",
    # Ours: MM2 never deletes target topics; the DR site may want it (default false, as the issue asks).
    "sync.topic.deletions.enabled": "delete_topics",
}
_REPLICATION = {
    "replication.factor": "replication_factor",
    "offset-syncs.topic.replication.factor": "offset_syncs_replication_factor",
    "checkpoints.topic.replication.factor": "checkpoints_replication_factor",
}
_IGNORED = ("heartbeats.topic.replication.factor", "emit.heartbeats.enabled", "emit.heartbeats.interval.seconds",
            "config.storage.replication.factor", "offset.storage.replication.factor",
            "status.storage.replication.factor", "sync.topic.acls.enabled", "dedicated.mode.enable.internal.rest")


def from_properties(props: Mapping[str, str], solution_defaults: Mapping[str, str]) -> Settings:
    """Settings from an mm2.properties mapping; the first enabled flow is the one mirrored."""
    clusters = _list(props.get("clusters", ""))
    if len(clusters) < 2:
        raise SettingsError("clusters", f"needs at least two cluster aliases, got {props.get('clusters')!r}")
    flows = [(a, b) for a in clusters for b in clusters
             if a != b and _bool(f"{a}->{b}.enabled", props.get(f"{a}->{b}.enabled", "false"))]
    if not flows:
        raise SettingsError("clusters", "no flow is enabled (set e.g. primary->dr.enabled = true)")
    if len(flows) > 1:
        raise SettingsError(f"{flows[1][0]}->{flows[1][1]}.enabled", "only one enabled flow per mirror process")
    source, target = flows[0]
    flow = f"{source}->{target}."

    def get(key: str) -> str | None:
        return props.get(flow + key, props.get(key))

    for alias in (source, target):
        if not props.get(f"{alias}.bootstrap.servers", "").strip():
            raise SettingsError(f"{alias}.bootstrap.servers", "is required for every cluster of an enabled flow")
    values: dict[str, object] = {}
    for key, name in _SECONDS.items():
        if (raw := get(key)) is not None:
            values[name] = _seconds(key, raw)
    for key, name in _BOOLS.items():
        if (raw := get(key)) is not None:
            values[name] = _bool(key, raw)
    for key, name in _REPLICATION.items():
        if (raw := get(key)) is not None:
            values[name] = _whole(key, raw, -1)
    if (raw := get("tasks.max")) is not None:
        values["tasks"] = _whole("tasks.max", raw, 1)
    policy = get("replication.policy.class") or IDENTITY_POLICY
    if policy not in (IDENTITY_POLICY, DEFAULT_POLICY):
        raise SettingsError("replication.policy.class", f"unsupported policy {policy!r}")
    location = get("offset-syncs.topic.location") or "source"
    if location not in ("source", "target"):
        raise SettingsError("offset-syncs.topic.location", f"expected source or target, got {location!r}")
    topics = get("topics") or solution_defaults["topics"]
    exclude = get("topics.exclude") or get("topics.blacklist") or solution_defaults["topics.exclude"]
    groups = get("groups")
    groups_exclude = get("groups.exclude") or get("groups.blacklist")
    return Settings(
        source=source, target=target,
        source_cluster=_cluster(props, source), target_cluster=_cluster(props, target),
        topics=_list(topics), topics_exclude=_list(exclude),
        groups=_list(groups) if groups else (".*",),
        groups_exclude=_list(groups_exclude) if groups_exclude else DEFAULT_GROUPS_EXCLUDE,
        replication_policy=policy, separator=get("replication.policy.separator") or ".",
        offset_syncs_location=location,
        consumer=_clients(props, source, "consumer", flow), producer=_clients(props, target, "producer", flow),
        **values,  # type: ignore[arg-type]
    )


def _connects(key: str) -> bool:
    """Whether `key` says how a client reaches its cluster (its address and security), not how it is tuned."""
    return key in ("bootstrap.servers", "security.protocol") or key.startswith(("sasl.", "ssl."))


def _cluster(props: Mapping[str, str], alias: str) -> dict[str, str]:
    """MM2's cluster keys `<alias>.bootstrap.servers`, `<alias>.security.protocol`, `<alias>.sasl.*` and
    `<alias>.ssl.*`, which every client of that cluster takes."""
    prefix = f"{alias}."
    return {key[len(prefix):]: value.strip() for key, value in props.items()
            if key.startswith(prefix) and _connects(key[len(prefix):])}


def _clients(props: Mapping[str, str], alias: str, kind: str, flow: str) -> dict[str, str]:
    """`<alias>.<kind>.*`, then Connect's `<kind>.override.*`, then the flow's own overrides (last wins)."""
    out: dict[str, str] = {}
    for prefix in (f"{alias}.{kind}.", f"{kind}.override.", f"{flow}{kind}.override."):
        out.update({k[len(prefix):]: v for k, v in props.items() if k.startswith(prefix)})
    return out


def load(path: Path, solution_defaults: Mapping[str, str]) -> Settings:
    return from_properties(_read(path, str(path)), solution_defaults)


def _read(path: Path, key: str) -> dict[str, str]:
    """A properties file (`key` names it in errors); refused when it holds a secret and is open to other users."""
    try:
        props = load_properties(path)
        mode = path.stat().st_mode
    except PropertiesError as exc:
        raise SettingsError(key, str(exc)) from None
    secret = next((k for k in sorted(props) if any(k == s or k.endswith(f".{s}") for s in SECRET_KEYS)), None)
    if secret is not None and mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise SettingsError(secret, f"{path} holds this secret but is open to other users (mode "
                                    f"{stat.S_IMODE(mode):o}); chmod 600 it")
    return props


def from_legacy_flags(*, consumer_config: Path | None, producer_config: Path | None, include: str | None,
                      exclude: str | None, streams: int, solution_defaults: Mapping[str, str]) -> Settings:
    """The old MirrorMaker's command line: each cluster as the client files say (over the solution's), `--whitelist`
    as one Java-style regex in which a comma means `|`, as the old tool read it."""
    consumer = _client_file("--consumer.config", consumer_config)
    producer = _client_file("--producer.config", producer_config)
    topics = (include.replace(",", "|"),) if include else _list(solution_defaults["topics"])
    return Settings(
        source="source", target="target",
        source_cluster=_connection(consumer, _cluster(solution_defaults, "source")),
        target_cluster=_connection(producer, _cluster(solution_defaults, "target")),
        topics=topics,
        topics_exclude=(exclude.replace(",", "|"),) if exclude else _list(solution_defaults["topics.exclude"]),
        tasks=streams, consumer=consumer, producer=producer,
    )


def _client_file(flag: str, path: Path | None) -> dict[str, str]:
    return {} if path is None else _read(path, flag)


def _connection(client: dict[str, str], solution: dict[str, str]) -> dict[str, str]:
    """The solution's settings for the cluster with those of an old-style client file over them (taken out of
    it: the rest tunes the client), as a `--bootstrap-server` flag overrides the address only."""
    taken = {key: client.pop(key) for key in [k for k in client if _connects(k)]}
    return {**solution, **taken}
