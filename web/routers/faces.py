"""``/api/v1/captures/faces`` (viewer): who else looks like this face, when and where, across the retained history.

Following one person through the city is personal data at its most sensitive: a search needs a ``reason`` and is
audited (``captures.face_search``, the query capture's record id or ``feature`` as the subject) before the index is
read, found or not. Watching a face found here is the watchlist API's (operator).

Registered before the captures router, whose ``/{kind}/{record_id}`` would otherwise take ``/faces/status``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fastapi import APIRouter, Depends, HTTPException, status
from fastapi.responses import JSONResponse

from contracts.deployment_map import MapError
from contracts.records import CITY_TZ, format_time
from web.auth import Role
from web.dependencies import AuditDep, DataDep, FacesDep, SettingsDep, ViewerDep, require_role
from web.models.faces import FaceIndexStatus, FaceSearchIn, FaceSearchOut
from web.routers.data_common import asked, audit_read, invalid
from web.services.face_follow import FaceSearch
from web.services.face_index import Where

router = APIRouter(prefix="/api/v1/captures/faces", tags=["captures"],
                   dependencies=[Depends(require_role(Role.VIEWER))])

RETRY_AFTER_S = 5
NOT_READY: dict[int | str, dict[str, Any]] = {
    503: {"description": "the face index is still being built (Retry-After; ``progress`` says how far), or the "
                         "audit trail is unavailable (``backend`` names it)"},
}


def _ms(moment: datetime) -> int:
    return round(moment.timestamp() * 1000)


def _check_place(body: FaceSearchIn, data: DataDep) -> None:
    """422 naming ``district`` or ``checkpoint`` when the deployment map does not know it (the map being unreadable
    is no reason to refuse a search: the filter then only matches what it names)."""
    try:
        loaded = data.map.current()
    except MapError:
        return
    if body.district is not None and body.district not in loaded.districts:
        raise invalid("body", "district", f"no district {body.district} on the deployment map")
    if body.checkpoint is not None and body.checkpoint not in loaded.checkpoints:
        raise invalid("body", "checkpoint", f"no checkpoint {body.checkpoint} on the deployment map")


def _not_ready(faces: FaceSearch) -> JSONResponse:
    return JSONResponse({"detail": "the face index is being built; ask again shortly", "backend": "face_index",
                         "progress": faces.progress()}, status_code=status.HTTP_503_SERVICE_UNAVAILABLE,
                        headers={"Retry-After": str(RETRY_AFTER_S)})


@router.post("/similar", response_model=FaceSearchOut, responses=NOT_READY)
def similar(body: FaceSearchIn, user: ViewerDep, audit: AuditDep, settings: SettingsDep, data: DataDep,
            faces: FacesDep) -> FaceSearchOut | JSONResponse:
    """The face captures in ``[from, to)`` (and the ``district`` or ``checkpoint``, if given) whose cosine with the
    query reaches ``min_score``: the best ``limit``, best first, each with its time and place.

    The query is a face capture (``capture``: its record id; it is found itself, score 1.0) or a ``feature``. The
    range may span at most ``[console] face_search_max_days``. Until the index is built: 503 with Retry-After."""
    if (body.capture is None) == (body.feature is None):
        raise invalid("body", "capture" if body.capture is None else "feature", "give either capture or feature")
    start_ms, end_ms = _ms(body.start), _ms(body.end)
    if end_ms <= start_ms:
        raise invalid("body", "to", "to must be after from")
    if end_ms - start_ms > settings.face_search_max_days * 86_400_000:
        raise invalid("body", "to", f"the range may span at most {settings.face_search_max_days} days "
                                    "([console] face_search_max_days)")
    _check_place(body, data)
    index = faces.ready_index()
    if index is None:
        return _not_ready(faces)
    min_score = settings.face_search_min_score if body.min_score is None else body.min_score
    query = asked(**{"from": body.start, "to": body.end, "district": body.district, "checkpoint": body.checkpoint,
                     "min_score": min_score, "limit": body.limit})
    audit_read(audit, user, "captures.face_search", body.capture or "feature", query, body.reason)
    vector = body.query_vector() if body.capture is None else index.vector_of(body.capture)
    if vector is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no searchable face capture {body.capture!r} (unknown, not a "
                                                       "face, unrecognised, or older than the retention)")
    hits, matched = index.search(vector, Where(start_ms, end_ms, body.checkpoint, body.district), min_score,
                                 body.limit)
    items = [{"record_id": hit.record_id, "score": hit.score, "checkpoint_id": hit.checkpoint_id,
              "capture_time": format_time(datetime.fromtimestamp(hit.capture_ms / 1000, CITY_TZ)),
              "location": data.map.locate(hit.checkpoint_id)} for hit in hits]
    return FaceSearchOut.model_validate({"items": items, "matched": matched, "min_score": min_score,
                                         "searched_faces": len(index)})


@router.get("/status", response_model=FaceIndexStatus)
def index_status(faces: FacesDep) -> FaceIndexStatus:
    """How the face index stands: built or building (how far), faces and days held, bus records set aside."""
    return FaceIndexStatus.model_validate(faces.progress())
