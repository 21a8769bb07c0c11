"""``/api/v1/captures`` (viewer): search by plate or by checkpoint and time range, multi-condition vehicle search;
one record's detail and image.

Every answer here is personal data, so each request is audited before anything is read (``captures.search`` and
``captures.vehicle_search`` with their required ``reason``, ``captures.by_checkpoint``, ``captures.detail``,
``captures.image``): no audit event, no data (503).
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Header, HTTPException, Path, Query, Request, Response, status
from pydantic import AfterValidator, AwareDatetime
from sse_starlette import EventSourceResponse
from starlette.concurrency import run_in_threadpool

from contracts.deployment_map import MapError
from contracts.records import Kind, is_checkpoint_id, is_plate
from contracts.tables import MAX_MS
from contracts.tables import captures as layout
from web.auth import Role
from web.backends import BackendUnavailable
from web.dependencies import (
    AuditDep,
    BackendsDep,
    DataDep,
    ImagesDep,
    LiveDep,
    SettingsDep,
    ViewerDep,
    require_role,
)
from web.hardening import credentials_check, until_revoked
from web.models.captures import CaptureDetail, CapturePage, VehiclePage
from web.redaction import record_for
from web.routers.data_common import Reason, answering, asked, audit_read, invalid, required_reason
from web.services import captures, vehicle_search
from web.services.capture_images import JPEG, DecodersBusy, ImageTooLarge, ImageUnreadable, image_key
from web.services.video_media import media_headers

router = APIRouter(prefix="/api/v1/captures", tags=["captures"], dependencies=[Depends(require_role(Role.VIEWER))])

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


def _plate_or_pattern(value: str | None) -> str | None:
    if value is not None:
        if vehicle_search.is_pattern(value):
            vehicle_search.check_pattern(value)  # ValueError -> 422 naming plate
        else:
            _plate(value)
    return value


PlateOrPattern = Annotated[str | None, Query(max_length=16, description="a plate (浙AWL999) or a pattern: * any run, "
                                                                        "? one character (浙A*12?)"),
                           AfterValidator(_plate_or_pattern)]
From = Annotated[AwareDatetime, Query(alias="from", description="ISO-8601 with offset, inclusive")]
To = Annotated[AwareDatetime, Query(alias="to", description="ISO-8601 with offset, exclusive")]
Attribute = Annotated[str | None, Query(min_length=1, max_length=32)]
DistrictCode = Annotated[str | None, Query(pattern=r"^\d{1,6}$", description="the district code, e.g. 330102")]


def _vehicle_query(settings: SettingsDep, from_: From, to: To, district: DistrictCode = None,
                   checkpoint: CheckpointId = None, lane: Annotated[int | None, Query(ge=1, le=99)] = None,
                   plate: PlateOrPattern = None, plate_color: Attribute = None, vehicle_color: Attribute = None,
                   vehicle_type: Attribute = None, brand: Attribute = None,
                   direction: Annotated[str | None, Query(pattern=r"^\d{1,2}$")] = None) -> vehicle_search.VehicleQuery:
    """The search's conditions, its time range checked (422 naming ``from`` or ``to``)."""
    start, end = round(from_.timestamp() * 1000), round(to.timestamp() * 1000)
    if not 1 <= start < MAX_MS:
        raise invalid("query", "from", "from is outside the times a row key can hold (1970 to 2286)")
    if not start < end <= MAX_MS:
        raise invalid("query", "to", "to must be after from" if end <= start else "to is after 2286")
    if end - start > settings.vehicle_search_max_days * 86_400_000:
        raise invalid("query", "to", f"from..to spans more than {settings.vehicle_search_max_days} days "
                                     "([console] vehicle_search_max_days)")
    return vehicle_search.VehicleQuery(start, end, district, checkpoint, lane, plate, plate_color, vehicle_color,
                                       vehicle_type, brand, direction)


def _utc(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


VehicleQueryDep = Annotated[vehicle_search.VehicleQuery, Depends(_vehicle_query)]


@router.get("/vehicles", response_model=VehiclePage)
def vehicles(user: ViewerDep, audit: AuditDep, backends: BackendsDep, data: DataDep, query: VehicleQueryDep,
             limit: Limit = 50, cursor: Cursor = None, reason: Reason = None) -> VehiclePage:
    """Vehicles captured in ``[from, to)`` matching every condition given, newest first, each with its location.

    Answered from index tables (``web.services.vehicle_search`` says which serves which conditions), a bounded
    number of index rows per request: a page may have fewer than ``limit`` items and still a ``next``. Places
    are checked against the deployment map (422 naming the field; 503 ``map`` when it cannot be read). Audited
    (``captures.vehicle_search``, ``reason`` required) after those checks and before anything is read.
    """
    try:
        loaded = data.map.current()
    except MapError as exc:
        raise BackendUnavailable("map", str(exc)) from None
    with answering("query"):
        districts = vehicle_search.check_places(loaded, query)
        position = vehicle_search.cursor_position(query, cursor)
    conditions = {name: value for name, value in asdict(query).items() if name not in ("start_ms", "end_ms")}
    target = query.plate or query.checkpoint or query.district or query.brand or "vehicles"
    audit_read(audit, user, "captures.vehicle_search", target,
               asked(**{"from": _utc(query.start_ms), "to": _utc(query.end_ms)}, **conditions, limit=limit,
                     cursor=cursor), required_reason(reason, "to search vehicles"))
    with answering("query"), backends.hbase() as conn:
        page = vehicle_search.search(conn, query, districts, limit, position, data.map.locate)
    return VehiclePage.model_validate({"items": page.items, "next": page.next})


@router.get("/{kind}/{record_id}", response_model=CaptureDetail)
def detail(kind: Kind, record_id: Annotated[str, Path(min_length=1, max_length=200)], user: ViewerDep,
           audit: AuditDep, backends: BackendsDep, data: DataDep, reason: Reason = None) -> CaptureDetail:
    """The whole record as stored, with ingest_time, latency_ms (ingest - capture) and its location (a viewer's
    without the face feature vector). Audited (``captures.detail``) before the lookup, found or not."""
    audit_read(audit, user, "captures.detail", record_id, asked(kind=kind), reason)
    with answering("path"), backends.hbase() as conn:
        return CaptureDetail(**record_for(user, captures.capture_detail(conn, kind, record_id, data.map.locate)))


Size = Annotated[Literal["full", "thumb"], Query(description="full: the stored JPEG as the device sent it; thumb: a "
                                                             "small copy for lists (made once, cached in the store)")]
IfNoneMatch = Annotated[str | None, Header(alias="If-None-Match")]
IMAGE_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"content": {JPEG: {"schema": {"type": "string", "format": "binary"}}},
          "description": "the JPEG (``nosniff``, a sandboxing content-security policy)"},
    304: {"description": "the browser's copy (``If-None-Match``) is current"},
    404: {"description": "no such capture, or it has no image: the detail says why (the record's image_error)"},
    413: {"description": "the stored object is larger than [console] max_image_bytes: refused unread"},
    422: {"description": "the stored object is not a decodable JPEG (truncated, corrupt, another format)"},
    429: {"description": "every image decoder stayed busy (Retry-After)"},
    503: {"description": "HBase, the object store or the audit trail is unavailable (``backend`` names it)"},
}


@router.get("/{kind}/{record_id}/image", response_class=Response, responses=IMAGE_RESPONSES)
def image(kind: Annotated[str, Path(max_length=16, description="vehicle or face")],
          record_id: Annotated[str, Path(min_length=1, max_length=200)], user: ViewerDep,
          audit: AuditDep, backends: BackendsDep, images: ImagesDep, size: Size = "full", reason: Reason = None,
          if_none_match: IfNoneMatch = None) -> Response:
    """The capture's JPEG (``size=thumb``: a thumbnail ``[console] thumbnail_width`` wide), through the console.

    Audited (``captures.image``) before the lookup, found or not, like the record's detail: the image is the same
    personal data. A record without an image answers 404 with its ``image_error`` (why the device sent none, or why
    it could not be stored); an object over ``max_image_bytes`` 413 without being read; one that does not decode
    422 with the decoder's reason. Served ``private`` with an ETag: a page that shows the same thumbnail again
    revalidates instead of downloading it. An unknown kind is a 404 (no such image), asked of nobody's data."""
    if kind not in {k.value for k in Kind}:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no capture kind {kind!r}: vehicle or face")
    audit_read(audit, user, "captures.image", record_id, asked(kind=kind, size=size), reason)
    with answering("path"):
        with backends.hbase() as conn:
            record = captures.capture_detail(conn, Kind(kind), record_id, lambda _checkpoint: None)
        key = image_key(kind, record)
        try:
            stored = images.thumbnail(key) if size == "thumb" else images.original(key)
        except ImageTooLarge as exc:
            raise HTTPException(status.HTTP_413_REQUEST_ENTITY_TOO_LARGE, str(exc)) from None
        except ImageUnreadable as exc:
            raise HTTPException(status.HTTP_422_UNPROCESSABLE_ENTITY, str(exc)) from None
        except DecodersBusy as exc:
            raise HTTPException(status.HTTP_429_TOO_MANY_REQUESTS, str(exc), headers={"Retry-After": "2"}) from None
    media_type, safety = media_headers(JPEG)
    headers = {"Cache-Control": "private, max-age=300", "ETag": f'"{stored.etag}"', **safety}
    if if_none_match is not None and stored.etag and stored.etag in if_none_match:
        return Response(status_code=status.HTTP_304_NOT_MODIFIED, headers=headers)
    return Response(stored.data, media_type=media_type, headers=headers)


WallCheckpoint = Annotated[str, Query(max_length=40, description="e.g. 330102#1#0#0"), AfterValidator(_checkpoint)]


@router.get("/live", response_class=EventSourceResponse)
async def live(user: ViewerDep, audit: AuditDep, request: Request, settings: SettingsDep, follower: LiveDep,
               checkpoint: WallCheckpoint, reason: Reason = None) -> EventSourceResponse:
    """A checkpoint's captures as they arrive (Server-Sent Events, ``event: capture``): the map's live image wall.

    Each event is the capture's kind, record_id, checkpoint_id, capture_time, plate_number and image_url (or
    image_error): what the wall needs to show and name its image (``/{kind}/{record_id}/image``), no feature
    vector. Watching a checkpoint's traffic live is a read of personal data: audited once per connection
    (``captures.live``) before the stream starts, 503 when the audit event cannot be published; the stream ends
    (``event: closed``) when the session or token lapses, as ``/api/v1/events`` does."""
    await run_in_threadpool(audit_read, audit, user, "captures.live", checkpoint, {"checkpoint": checkpoint}, reason)
    stream = until_revoked(follower.stream(checkpoint), credentials_check(request, user.role),
                           settings.session_recheck_s)
    return EventSourceResponse(stream, ping=15, send_timeout=30)
