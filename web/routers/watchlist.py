"""``/api/v1/watchlist``: watched plates and faces (viewers read, operators command, every command audited).

A command is validated with the surveillance contract (422 naming the field), then published on
``control.watchlist``; removal publishes a tombstone. The service's verdict arrives on
``surveillance.replies`` and shows as the watch's ``status``. Hits are read from the hit loader's tables.

The list and the hits are personal data (watched plates and faces, where they were seen): each read is audited
(``watchlist.read``, ``hits.read``) before anything is fetched, and refused (503) when it cannot be.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, status

from web.dependencies import AuditDep, BackendsDep, DataDep, OperatorDep, SurveillanceDep, ViewerDep
from web.models.surveillance import HitOut, WatchHits, WatchIn, WatchOut, WatchPage
from web.routers.data_common import Reason, answering, asked, audit_read, audited
from web.services import surveillance

router = APIRouter(prefix="/api/v1", tags=["surveillance"])

WatchId = Annotated[str, Path(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$")]
Limit = Annotated[int, Query(ge=1, le=500)]


@router.get("/watchlist", response_model=WatchPage)
def watchlist(user: ViewerDep, audit: AuditDep, backends: BackendsDep, sv: SurveillanceDep, limit: Limit = 100,
              after: Annotated[str | None, Query(max_length=128, description="the previous page's next")] = None,
              kind: Annotated[str | None, Query(pattern="^(plate|face)$")] = None,
              reason: Reason = None) -> WatchPage:
    """Watches in id order, each with its service status, hit count and newest hit."""
    audit_read(audit, user, "watchlist.read", "", asked(limit=limit, after=after, kind=kind), reason)
    with backends.hbase() as conn:
        items, following = sv.watches(conn, limit, after, kind)
    return WatchPage.model_validate({"items": items, "next": following, "complete": sv.loaded()})


@router.post("/watchlist", response_model=WatchOut, status_code=status.HTTP_201_CREATED)
def add_watch(body: WatchIn, user: OperatorDep, audit: AuditDep, backends: BackendsDep,
              sv: SurveillanceDep) -> WatchOut:
    """Watch a plate, or a face (from a face capture's ``capture`` record id, or a base64 ``feature``)."""
    fields = body.command_fields()
    detail = {k: v for k, v in fields.items() if k != "feature"}
    target = body.plate or body.capture or "face"
    with answering("body"), audited(audit, user, "watch.add", target, detail):
        if body.capture:
            with backends.hbase() as conn:
                return WatchOut(**sv.add_watch(fields, user.username, conn))
        return WatchOut(**sv.add_watch(fields, user.username))


@router.delete("/watchlist/{watch_id}", response_model=WatchOut)
def remove_watch(watch_id: WatchId, user: OperatorDep, audit: AuditDep, sv: SurveillanceDep) -> WatchOut:
    """Stop watching (a tombstone on the compacted topic); the hits stay."""
    with answering("path"), audited(audit, user, "watch.remove", watch_id, {}):
        return WatchOut(**sv.remove_watch(watch_id))


@router.get("/watchlist/{watch_id}/hits", response_model=WatchHits)
def watch_hits(watch_id: WatchId, user: ViewerDep, audit: AuditDep, backends: BackendsDep, data: DataDep,
               sv: SurveillanceDep, limit: Limit = 100,
               cursor: Annotated[str | None, Query(max_length=1024)] = None, reason: Reason = None) -> WatchHits:
    """A watch's hits, newest first, and the page's trajectory (oldest first) with locations from the map."""
    audit_read(audit, user, "hits.read", watch_id, asked(limit=limit, cursor=cursor), reason)
    with answering("query"), backends.hbase() as conn:
        value = sv.get_watch(watch_id)
        hits, following = surveillance.watch_hits(conn, watch_id, limit, cursor)
        watch = sv.watch_out(watch_id, value, conn)
    return WatchHits.model_validate({"watch": watch, "items": hits, "next": following,
                                     "trajectory": surveillance.trajectory(hits, data.map.locate)})


@router.get("/hits", response_model=list[HitOut])
def recent_hits(user: ViewerDep, audit: AuditDep, backends: BackendsDep, limit: Limit = 50,
                reason: Reason = None) -> list[HitOut]:
    """The city's newest hits, every kind (cloned plates of unwatched plates too)."""
    audit_read(audit, user, "hits.read", "", asked(limit=limit), reason)
    with backends.hbase() as conn:
        return [HitOut.model_validate(h) for h in surveillance.recent_hits(conn, limit)]
