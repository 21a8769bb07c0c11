"""``/api/v1/captures`` (viewer): search by plate or by checkpoint and time range; one record's detail.

Every answer here is personal data, so each request is audited before anything is read (``captures.search`` with
its required ``reason``, ``captures.by_checkpoint``, ``captures.detail``): no audit event, no data (503).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Path, Query
from pydantic import AfterValidator, AwareDatetime

from contracts.records import Kind, is_checkpoint_id, is_plate
from contracts.tables import captures as layout
from web.dependencies import AuditDep, BackendsDep, ViewerDep
from web.models.captures import CaptureDetail, CapturePage
from web.redaction import record_for
from web.routers.data_common import DataDep, Reason, answering, asked, audit_read, invalid, required_reason
from web.services import captures

router = APIRouter(prefix="/api/v1/captures", tags=["captures"])

# The HBase connection is taken inside the (sync) route, never through a generator dependency: FastAPI
# enters and leaves a sync generator dependency in different worker threads, and happybase's pool keeps
# the connection it lent in a thread-local, so the release failed (AttributeError) and the request died.


def _plate(value: str | None) -> str | None:
    if value is not None and not is_plate(value):
        raise ValueError("not a plate number (province character, city letter, 5 or 6 characters, e.g. 浙AWL999)")
    return value


def _checkpoint(value: str | None) -> str | None:
    if value is not None and not is_checkpoint_id(value):
        raise ValueError("not a checkpoint id (district#crossroad#direction#index, e.g. 330102#1#0#0)")
    return value


def _cursor(value: str | None) -> str | None:
    if value is not None:
        captures.decode_cursor(value)  # ValueError -> 422 naming cursor
    return value


def epoch_ms(moment: datetime | None) -> int | None:
    return None if moment is None else round(moment.timestamp() * 1000)


Plate = Annotated[str | None, Query(max_length=16, description="plate number, e.g. 浙AWL999"), AfterValidator(_plate)]
CheckpointId = Annotated[str | None, Query(max_length=40, description="e.g. 330102#1#0#0"),
                         AfterValidator(_checkpoint)]
Time = Annotated[AwareDatetime | None, Query(description="ISO-8601 with offset; start inclusive, end exclusive")]
Limit = Annotated[int, Query(ge=1, le=captures.MAX_LIMIT)]
Cursor = Annotated[str | None, Query(max_length=1024, description="the previous page's next"),
                   AfterValidator(_cursor)]


def _check_window(prefix: bytes, start: datetime | None, end: datetime | None, key: bytes | None) -> None:
    """The search's own checks of its time window and cursor (422 naming the field), made before the audit: a
    request refused for a mistake reads nothing, so it is not an audited read. The service checks them again."""
    with answering("query"):
        first, stop = captures.time_bounds(prefix, epoch_ms(start), epoch_ms(end))
    if key is not None and not first <= key < stop:
        raise invalid("query", "cursor", "this cursor belongs to another search")


@router.get("", response_model=CapturePage)
def search(user: ViewerDep, audit: AuditDep, backends: BackendsDep, data: DataDep, plate: Plate = None,
           checkpoint: CheckpointId = None, start: Time = None, end: Time = None, limit: Limit = 50,
           cursor: Cursor = None, reason: Reason = None) -> CapturePage:
    """A plate's trajectory (``vehicle_by_plate``) or a checkpoint's captures (``capture_by_checkpoint``).

    Newest first, ``limit`` per page; pass the answer's ``next`` as ``cursor`` for the following page. Following
    one person's car is the most sensitive read the console offers: a search by plate needs a ``reason`` (a case
    number), kept in the audit trail with the plate; by checkpoint the reason is optional.
    """
    if (plate is None) == (checkpoint is None):
        raise invalid("query", "plate" if plate is None else "checkpoint", "give either plate or checkpoint")
    key = captures.decode_cursor(cursor) if cursor is not None else None
    prefix = layout.plate_prefix(plate) if plate is not None else layout.checkpoint_prefix(checkpoint or "")
    _check_window(prefix, start, end, key)
    window = asked(start=start, end=end, limit=limit, cursor=cursor)
    if plate is not None:
        audit_read(audit, user, "captures.search", plate, {"plate": plate, **window},
                   required_reason(reason, "to search by plate"))
    else:
        audit_read(audit, user, "captures.by_checkpoint", checkpoint or "", {"checkpoint": checkpoint, **window},
                   reason)
    with answering("query"), backends.hbase() as conn:
        if plate is not None:
            page = captures.plate_trajectory(conn, plate, epoch_ms(start), epoch_ms(end), limit, key, data.map.locate)
        else:
            page = captures.checkpoint_captures(conn, checkpoint or "", epoch_ms(start), epoch_ms(end), limit, key,
                                                data.map.locate)
    return CapturePage.model_validate({"items": page.items, "next": page.next})


@router.get("/{kind}/{record_id}", response_model=CaptureDetail)
def detail(kind: Kind, record_id: Annotated[str, Path(min_length=1, max_length=200)], user: ViewerDep,
           audit: AuditDep, backends: BackendsDep, data: DataDep, reason: Reason = None) -> CaptureDetail:
    """The whole record as stored, with ingest_time, latency_ms (ingest - capture) and its location (a viewer's
    without the face feature vector). Audited (``captures.detail``) before the lookup, found or not."""
    audit_read(audit, user, "captures.detail", record_id, asked(kind=kind), reason)
    with answering("path"), backends.hbase() as conn:
        return CaptureDetail(**record_for(user, captures.capture_detail(conn, kind, record_id, data.map.locate)))
