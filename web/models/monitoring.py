"""``/api/v1/monitoring/*``: latency and quality per hour of a day, and each device's health.

The shapes are ``monitoring.queries``' (the issue's Interface section); hours are the city's local hours.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel


class Percentiles(BaseModel):
    count: int
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    """None for an hour without data (never a made-up zero)."""


class LatencyPoint(Percentiles):
    """One hour: the end-to-end stage (capture -> ingest) at the top level, every stage under ``stages``."""

    hour: int
    stages: dict[str, Percentiles]
    """capture_to_bus, bus_to_read, read_to_write, capture_to_ingest."""


class QualityPoint(BaseModel):
    hour: int
    produced: int
    """Records the devices said they sent (heartbeats)."""
    read: int
    valid: int
    unrecognized: int
    invalid: int


class DeviceLocation(BaseModel):
    district: str
    crossroad: str
    direction: str
    lat: float | None
    lon: float | None
    known: bool
    """False for a device missing from the deployment map (district "unknown")."""


class DeviceHealth(BaseModel):
    device_ip: str
    state: Literal["healthy", "degraded", "silent", "recovering"]
    since: float | None
    """Epoch seconds of the last state change."""
    last_seen: float | None
    """Epoch seconds of the last heartbeat."""
    bad_share: float | None
    """Share of records unreadable or missing over the monitor's window."""
    images_bad_share: float | None = None
    """Share of its sampled capture images missing, undecodable or black over ``[monitoring.images] window_s``
    (None: too few sampled)."""
    reason: str = ""
    """Why it is (or, recovering, was) degraded: ``records``, ``images``, ``video``, comma-joined."""
    video_problem: str = ""
    """A camera's video problem: ``gap`` (silent: no new segment), ``undecodable``, ``black``, ``blurred`` or
    ``frozen`` (degraded); kept while it recovers; "" for none and for capture devices."""
    recognizer_ip: str
    checkpoint_id: str
    location: DeviceLocation
