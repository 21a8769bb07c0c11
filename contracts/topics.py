"""The bus topics every part agrees on (docs/architecture.md "Topics"), named once.

Each name is a default that ``[topics]`` of the solution config may override (key = the field name
below), so a deployment can share a Kafka cluster with others. Code never spells a topic name: it
asks a :class:`Topics` built from the config it was given.

The data/control split is the book's (10.3.6): data topics are mirrored to the DR cluster, control
topics (commands that only make sense where they were issued) are not. The watch and statistics commands
are data in this sense: compacted, they are the watchlists and statistics themselves, which the DR site's
surveillance service needs to take over. A video command is not: the task runs where it was asked, and its
status and results are mirrored.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

from .records import Kind

if TYPE_CHECKING:
    from .config import Config


DR_PREFIX = "dr."
"""The DR site's own copies of the topics its jobs publish (``dr.ingest.stats``, ``dr.capture.deadletter``): the
mirror must be the only writer of a mirrored topic (it resumes from the target's log end and keeps the source's
offsets), so a job running at the DR site publishes beside it."""
SITE_ALIASES = ("primary", "dr")
"""The two sites as MirrorMaker 2's cluster aliases name them (``primary.checkpoints.internal`` on the DR site)."""


@dataclass(frozen=True)
class Topics:
    vehicle: str = "capture.vehicle"
    face: str = "capture.face"
    heartbeat: str = "device.heartbeat"
    ingest_stats: str = "ingest.stats"
    deadletter: str = "capture.deadletter"
    video_commands: str = "video.commands"
    video_status: str = "video.status"
    video_results: str = "video.results"
    control_watchlist: str = "control.watchlist"
    control_stats: str = "control.stats"
    surveillance_hits: str = "surveillance.hits"
    surveillance_stats: str = "surveillance.stats"
    surveillance_replies: str = "surveillance.replies"
    alerts: str = "alerts"
    plate_sightings: str = "surveillance.plate-sightings"
    stat_events: str = "surveillance.stat-events"
    audit: str = "audit"
    """Who read or commanded what through the console (``contracts.audit``): appended only, mirrored."""
    console_accounts: str = "console.accounts"
    """The console's users and page sessions as changes to their HBase rows (`web/auth/replication.py`): compacted,
    mirrored, so the DR site's console knows the same users and sessions."""

    CONTROL = ("video_commands",)
    """Field names of the control topics (not mirrored); every other topic carries data, except the internal ones."""
    COMMANDS = ("video_commands", "control_watchlist", "control_stats")
    """Field names of the topics the console's commands go to, mirrored or not: a viewer may not read them raw."""
    INTERNAL = ("plate_sightings", "stat_events")
    """A service's private repartition topics (Kafka Streams' ``-repartition``): rebuilt from data, not mirrored."""

    @classmethod
    def from_config(cls, config: Config) -> Topics:
        section = config.section("topics")
        names = {f.name for f in fields(cls)}
        values = {}
        for key, value in section.items():
            if key not in names:
                continue  # other keys of [topics] (e.g. partitions) are not names
            if not isinstance(value, str) or not value:
                raise ValueError(f"topics.{key} in {config.path} should be a topic name, not {value!r}")
            values[key] = value
        return cls(**values)

    def data(self) -> tuple[str, ...]:
        """Topics mirrored to the DR site."""
        return tuple(getattr(self, f.name) for f in fields(self) if f.name not in self.CONTROL + self.INTERNAL)

    def control(self) -> tuple[str, ...]:
        return tuple(getattr(self, name) for name in self.CONTROL)

    def commands(self) -> tuple[str, ...]:
        return tuple(getattr(self, name) for name in self.COMMANDS)

    @property
    def captures(self) -> tuple[str, str]:
        return self.vehicle, self.face

    def of_kind(self, kind: Kind) -> str:
        return self.vehicle if kind is Kind.VEHICLE else self.face

    def kind_of(self, topic: str) -> Kind | None:
        """The capture kind a topic carries, or None for any other topic."""
        return {self.vehicle: Kind.VEHICLE, self.face: Kind.FACE}.get(topic)


def site_local(site: str, topic: str) -> str:
    """A standing-by site's own copy of ``topic`` (``dr.audit``, ``primary.audit``), which no mirror copies: what a
    process at that site must publish while the mirror is the only writer of ``topic`` there (:data:`DR_PREFIX` is
    the DR site's)."""
    return f"{site}.{topic}"


def partitions(config: Config) -> int:
    """Partitions a data topic is created with when a part creates it (one Spark task per partition)."""
    value = config.section("topics").get("partitions", 2)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"topics.partitions in {config.path} should be a positive integer, not {value!r}")
    return value


NEW_TOPIC_ERRORS = frozenset({3, 5, 6})
"""Kafka error codes (UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER) a cluster answers
for a topic it has just created, or a partition between leaders, until every broker has applied the change: ask
again, it is not a failure. librdkafka does not retry them for a watermark query, so its callers do."""
