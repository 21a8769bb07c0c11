"""``/api/v1/watchlist`` and ``/api/v1/stats``: commands in, watches, hits and statistic results out.

Request bodies check shapes only (types, lengths); what a command means (a plate's format, base64 of
128 float32, a threshold in (0, 1], a known measure) is checked by the contract's own validators, the
same the surveillance service runs, so the console and the service can never disagree on what is valid.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, StringConstraints

Status = Literal["pending", "accepted", "rejected", "removed"]
"""What the service made of a command: ``pending`` until its reply arrives."""


class WatchIn(BaseModel):
    """A new watch: a ``plate``, or a face by ``capture`` (a face record's id) or by base64 ``feature``."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["plate", "face"]
    plate: Annotated[str, StringConstraints(strip_whitespace=True, to_upper=True, max_length=16)] | None = None
    capture: Annotated[str, StringConstraints(min_length=1, max_length=200)] | None = None
    feature: Annotated[str, StringConstraints(max_length=2000)] | None = None
    threshold: float | None = None
    """Cosine similarity a face must reach (default 0.8)."""
    checkpoints: Annotated[list[str], Field(max_length=500)] | None = None
    districts: Annotated[list[str], Field(max_length=100)] | None = None
    expires_at: AwareDatetime | None = None
    reason: Annotated[str, StringConstraints(strip_whitespace=True, max_length=500)] = ""

    def command_fields(self) -> dict[str, Any]:
        """The body as the command's fields (times as ISO-8601 text, as the contract reads them)."""
        fields = self.model_dump(exclude_none=True)
        if self.expires_at is not None:
            fields["expires_at"] = self.expires_at.isoformat(timespec="milliseconds")
        return fields


class WatchOut(BaseModel):
    watch_id: str
    kind: str
    plate: str | None
    threshold: float | None
    capture: str | None
    """The face capture the watched face was taken from, if any."""
    checkpoints: list[str]
    districts: list[str]
    expires_at: str | None
    reason: str
    requested_by: str
    requested_at: str | None
    status: Status
    status_reason: str
    """Why the service rejected it."""
    status_time: str | None
    hits: int
    hits_capped: bool
    """True when there are at least ``hits`` (counting stopped there)."""
    last_hit: str | None
    """Capture time of the newest hit."""


class WatchPage(BaseModel):
    items: list[WatchOut]
    """In watch id order."""
    next: str | None
    """The ``after`` of the next page, or null at the end."""
    complete: bool
    """False while the console is still reading the watchlist the bus held when it started."""


class HitOut(BaseModel):
    """One hit as the service published it (``surveillance.hits``); cloned-plate hits carry their sightings."""

    model_config = ConfigDict(extra="allow")

    hit_id: str
    watch_id: str | None
    kind: str
    match: str | None = None
    record_id: str
    checkpoint_id: str
    capture_time: str
    score: float | None = None
    location: dict[str, Any] | None = None
    detected_at: str | None = None


class TrajectoryPoint(BaseModel):
    hit_id: str | None
    record_id: str | None
    checkpoint_id: str | None
    capture_time: str | None
    location: dict[str, Any] | None


class WatchHits(BaseModel):
    watch: WatchOut
    items: list[HitOut]
    """Newest first."""
    next: str | None
    trajectory: list[TrajectoryPoint]
    """This page's hits as a path, oldest first."""


class StatIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    measure: Annotated[str, StringConstraints(max_length=40)]
    group_by: Annotated[str, StringConstraints(max_length=40)]
    window_s: int
    filter: dict[Annotated[str, StringConstraints(max_length=60)], str | int | float | bool] | None = None


class StatOut(BaseModel):
    stat_id: str
    measure: str
    group_by: str
    window_s: int
    filter: dict[str, Any]
    requested_by: str
    requested_at: str | None
    status: Status
    status_reason: str
    status_time: str | None


class StatResult(BaseModel):
    """One window's value for one group; partial while the window is open, then one final."""

    model_config = ConfigDict(extra="allow")

    stat_id: str
    window_start: str
    window_end: str
    group: str
    value: float | None
    final: bool


class StatResultOut(StatResult):
    """A result as the console serves it: a lane's also names its checkpoint and lane (parsed from the group)."""

    checkpoint_id: str | None = None
    lane: int | None = None


class StatResults(BaseModel):
    stat: StatOut
    results: list[StatResultOut]
    """Oldest window first; the latest value per window and group."""
    lanes: dict[str, int] | None = None
    """For a statistic grouped by lane: each checkpoint's lane count on the deployment map (the checkpoint it is
    filtered to, else every checkpoint; empty when the map cannot be read); null for other groupings."""
