"""``/api/v1/dr/*``: the DR mirror's lag (now and over the last hour), its checkpoints, and the drills."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field


class PartitionLag(BaseModel):
    topic: str
    partition: int
    lag: int
    """Source high watermark minus the mirror's position (records)."""
    lag_seconds: float | None = None
    """While records wait: now minus the newest record timestamp the DR site holds of the partition (0 when none
    wait; None while unknown: nothing of it mirrored yet)."""
    stopped: bool = False
    """An error stopped this partition (e.g. a record larger than the target accepts); the mirror log says why."""


class Rpo(BaseModel):
    """What losing the primary now would cost."""

    records: int
    """Records written at the primary and not yet at the DR site."""
    seconds: float | None
    """The span of writes they cover: the largest partition lag in seconds (None while one is unknown)."""


class LagNow(BaseModel):
    total: int
    partitions: list[PartitionLag]
    rpo: Rpo


class LagPartitionSample(BaseModel):
    topic: str
    partition: int
    lag: int | None


class LagSample(BaseModel):
    time_ms: int
    total: int
    partitions: list[LagPartitionSample]


class CheckpointOut(BaseModel):
    """MirrorMaker 2's checkpoint: the group's committed offset on the primary and its translation on DR."""

    group: str
    topic: str
    partition: int
    upstream_offset: int
    downstream_offset: int
    time_ms: int


class DrillSummary(BaseModel):
    name: str
    finished: str
    scenario: str | None
    has_chart: bool
    report: dict[str, Any]
    """The drill's JSON figures (RPO, RTO, rows, duplicates, ...), as the drill wrote them."""


class DrillReport(BaseModel):
    name: str
    finished: str
    report: dict[str, Any]
    markdown: str | None
    has_chart: bool


class DrillStart(BaseModel):
    scenario: Literal["primary-loss", "mirror-crash", "failback"]
    ingest: bool = True
    """False: a bus-only drill (no HBase gateways, no Spark ingest jobs, no object stores and so no image count; a
    minute instead of several)."""


class DrillRunning(BaseModel):
    name: str
    running: bool
    exit_code: int | None


class SwitchoverStart(BaseModel):
    """A switchover an admin asks for on the DR page (`python -m dr_mirror switchover`)."""

    to: Literal["primary", "dr"]
    """The site that runs the business next (``primary``: the failback)."""
    reason: str = Field(min_length=3, max_length=200)
    """Why, kept in the active-site record and the audit trail."""
    force: bool = False
    """Switch although the mirror is far behind or the site left does not answer (an unplanned switchover)."""


class SwitchoverRunning(BaseModel):
    """The switchover this console started last."""

    to: Literal["primary", "dr"]
    reason: str
    running: bool
    exit_code: int | None
    """0 switched (or already there), 1 refused or undone (nothing changed), 2 bad input; None while it runs."""
    said: str
    """What the command printed so far (its last lines): the drain, the refusal's reason, the new record."""
