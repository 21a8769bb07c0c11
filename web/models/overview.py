"""``GET /api/v1/overview``: the operations centre's first screen, from in-memory state only.

A figure that nothing has reported yet is null, never zero.
"""

from __future__ import annotations

from pydantic import BaseModel

from web.models.health import Health


class LatencyFigures(BaseModel):
    p50: float | None
    p99: float | None


class IngestFigures(BaseModel):
    window_s: float
    """The figures cover the ``ingest.stats`` records of the last ``window_s`` seconds."""
    batches: int
    records_per_s: float | None
    rows_per_s: float | None
    latency_ms: LatencyFigures
    """Capture -> HBase, from each job's latest batch (percentiles weighted by the batch's count)."""
    invalid: int | None
    unrecognized: int | None
    last_batch_age_s: float | None


class OverviewOut(BaseModel):
    ingest: IngestFigures
    health: Health | None
    health_age_s: float | None
    open_alerts: int | None
    """Alerts whose latest state is ``firing``; null until the alerts topic has been read."""
