"""The ``[surveillance]`` section of the solution config, read once and checked at start.

A mistake (a negative horizon, a string where a number belongs) stops the service at start naming the
key, rather than surfacing later as a wrong hit. Every stage gets the same frozen :class:`Settings`.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from pathlib import Path

from contracts import bus_client
from contracts.active_site import Gate
from contracts.config import Config
from contracts.deployment_map import map_path
from contracts.topics import Topics, partitions

SECTION = "surveillance"
PRINCIPAL = "surveillance"
"""The service's bus identity (:data:`contracts.bus_client.PRINCIPALS`)."""


@dataclass(frozen=True)
class Settings:
    bus: dict[str, str] = field(repr=False)
    """The :data:`PRINCIPAL`'s client settings (:func:`contracts.bus_client.librdkafka`), which every client of
    the service starts from; they may hold its password, hence never in a repr or a log line."""
    topics: Topics
    map_path: Path
    partitions: int
    """Partitions of the topics the service creates when they do not exist yet."""
    instance: str
    """Names this process in replies and client ids: ``<[surveillance] instance, else the host name>:<pid>``.
    The pid is always there: scaling out starts more processes from one config on one host, and a shared
    name would make their replies and group members indistinguishable."""
    fuzzy: bool = True
    trajectory_points: int = 20
    clone_speed_kmh: float = 200.0
    sighting_horizon_s: float = 3600.0
    sighting_max_per_plate: int = 16
    sightings_retention_s: float = 7200.0
    allowed_lateness_s: float = 10.0
    partial_interval_s: float = 1.0
    metrics_port: int = 9330
    """Asked for, not promised: a port another instance holds is replaced by a free one (logged)."""
    metrics_host: str = "127.0.0.1"
    """The address /metrics binds: loopback for a Prometheus on this host, the host's own address (or 0.0.0.0) for
    one that scrapes it from another."""
    batch: int = 500
    """Records a stage takes per poll (faces: one matrix product per batch)."""
    commit_interval_s: float = 0.5
    site: Gate | None = field(default=None, compare=False)
    """At a site that may stand by (``[site]``): whether it is the active one. Standing by, every stage keeps its
    commands current and publishes nothing (the mirror writes the site's copies of the service's topics) and joins
    no consumer group (the mirror keeps those groups' offsets in step with the active site's)."""

    def standing_by(self) -> bool:
        return self.site is not None and not self.site.active()

    @property
    def bootstrap(self) -> str:
        """Where the bus is (``bootstrap.servers`` of :attr:`bus`)."""
        return self.bus["bootstrap.servers"]

    @classmethod
    def from_config(cls, config: Config) -> Settings:
        def number(key: str, default: float, low: float = 0.0) -> float:
            value = config.get(SECTION, key, default)
            if value <= low:
                raise ValueError(f"{SECTION}.{key} in {config.path} should be above {low}, not {value!r}")
            return value

        port = config.get(SECTION, "metrics_port", cls.metrics_port)
        if not 0 <= port < 65536:
            raise ValueError(f"{SECTION}.metrics_port in {config.path} should be a port (0: none), not {port}")
        metrics_host = config.get(SECTION, "metrics_host", cls.metrics_host)
        if not isinstance(metrics_host, str) or not metrics_host:
            raise ValueError(f"{SECTION}.metrics_host in {config.path} should be an address, not {metrics_host!r}")
        return cls(
            bus=bus_client.librdkafka(config, PRINCIPAL, config.get(SECTION, "bootstrap_servers", "") or None),
            topics=Topics.from_config(config), map_path=map_path(config),
            partitions=partitions(config),
            instance=f"{config.get(SECTION, 'instance', '') or socket.gethostname()}:{os.getpid()}",
            fuzzy=config.get(SECTION, "fuzzy", cls.fuzzy),
            trajectory_points=int(number("trajectory_points", cls.trajectory_points)),
            clone_speed_kmh=number("clone_speed_kmh", cls.clone_speed_kmh),
            sighting_horizon_s=number("sighting_horizon_s", cls.sighting_horizon_s),
            sighting_max_per_plate=int(number("sighting_max_per_plate", cls.sighting_max_per_plate, 1)),
            sightings_retention_s=number("sightings_retention_s", cls.sightings_retention_s),
            allowed_lateness_s=number("allowed_lateness_s", cls.allowed_lateness_s, -1e-9),
            partial_interval_s=number("partial_interval_s", cls.partial_interval_s, -1e-9),
            metrics_port=port, metrics_host=metrics_host,
            batch=int(number("batch", cls.batch)),
            commit_interval_s=number("commit_interval_s", cls.commit_interval_s),
            site=Gate.from_config(config))
