"""``/api/v1/captures`` (viewer): search by plate or by checkpoint and time range; one record's detail."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Path, Query
from pydantic import AfterValidator, AwareDatetime

from contracts.records import Kind, is_checkpoint_id, is_plate
from web.dependencies import BackendsDep, ViewerDep
from web.models.captures import CaptureDetail, CapturePage
from web.redaction import record_for
from web.routers.data_common import DataDep, answering, invalid
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


@router.get("", response_model=CapturePage)
def search(_user: ViewerDep, backends: BackendsDep, data: DataDep, plate: Plate = None, checkpoint: CheckpointId = None,
           start: Time = None, end: Time = None, limit: Limit = 50, cursor: Cursor = None) -> CapturePage:
    """A plate's trajectory (``vehicle_by_plate``) or a checkpoint's captures (``capture_by_checkpoint``).

    Newest first, ``limit`` per page; pass the answer's ``next`` as ``cursor`` for the following page.
    """
    if (plate is None) == (checkpoint is None):
        raise invalid("query", "plate" if plate is None else "checkpoint", "give either plate or checkpoint")
    key = captures.decode_cursor(cursor) if cursor is not None else None
    with answering("query"), backends.hbase() as conn:
        if plate is not None:
            page = captures.plate_trajectory(conn, plate, epoch_ms(start), epoch_ms(end), limit, key, data.map.locate)
        else:
            page = captures.checkpoint_captures(conn, checkpoint or "", epoch_ms(start), epoch_ms(end), limit, key,
                                                data.map.locate)
    return CapturePage.model_validate({"items": page.items, "next": page.next})


@router.get("/{kind}/{record_id}", response_model=CaptureDetail)
def detail(kind: Kind, record_id: Annotated[str, Path(min_length=1, max_length=200)], user: ViewerDep,
           backends: BackendsDep, data: DataDep) -> CaptureDetail:
    """The whole record as stored, with ingest_time, latency_ms (ingest - capture) and its location (a viewer's
    without the face feature vector)."""
    with answering("path"), backends.hbase() as conn:
        return CaptureDetail(**record_for(user, captures.capture_detail(conn, kind, record_id, data.map.locate)))
