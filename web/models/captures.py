"""``/api/v1/captures``: capture search results and one record's detail."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict


class Location(BaseModel):
    """Where a checkpoint is, from the deployment map."""

    district: str
    district_name: str | None
    crossroad: int
    direction: str
    lat: float
    lon: float


class CaptureItem(BaseModel):
    record_id: str
    kind: Literal["vehicle", "face"]
    capture_time: str
    """ISO-8601 with the device's offset, as captured."""
    checkpoint_id: str | None
    plate_number: str | None
    """Vehicles only."""
    device_ip: str | None
    ingest_time: str | None
    location: Location | None
    """Null when the map is missing or does not know the checkpoint."""


class CapturePage(BaseModel):
    items: list[CaptureItem]
    """Newest first."""
    next: str | None
    """Opaque cursor of the next (older) page, or null at the end."""


class VehicleItem(CaptureItem):
    """A vehicle search hit: the capture's fields plus the attributes searched on (from the index's covering cell)."""

    plate_color: str
    vehicle_color: str
    vehicle_type: str
    vehicle_brand: str
    lane: int


class VehiclePage(BaseModel):
    items: list[VehicleItem]
    """Newest first; fewer than ``limit`` when the request's scan budget ran out first (``next`` is then set)."""
    next: str | None
    """Opaque cursor resuming just after the last index row read, or null when the range is exhausted."""


class CaptureDetail(BaseModel):
    """The whole record as stored (every field of its schema), plus kind, ingest latency and location."""

    model_config = ConfigDict(extra="allow")

    record_id: str
    kind: Literal["vehicle", "face"]
    capture_time: str
    checkpoint_id: str
    device_ip: str
    ingest_time: str | None
    latency_ms: int | None
    """ingest_time - capture_time: how long the capture took to reach HBase."""
    location: Location | None
