"""``/api/v1/evidence``: lock a capture, a hit or a video as evidence (operator), read the locks (operator), unlock
(admin). A locked item outlives retention (its copy in ``console_evidence``, a video's object in the ``evidence``
bucket) until an admin unlocks it.

Locking and unlocking are commands, audited however they end (``evidence.lock`` with its required reason,
``evidence.unlock``); the list and a lock's record are reads of personal data, audited before anything is read
(``evidence.list``, ``evidence.read``; the locked footage as ``video.view`` / ``video.export``, as on the video page).
"""

from __future__ import annotations

from typing import Annotated, cast

from fastapi import APIRouter, Path, Query, Response, status
from fastapi.responses import StreamingResponse

from contracts.s3_credentials import EVIDENCE_BUCKET
from web.dependencies import AdminDep, AuditDep, DataDep, EvidenceDep, OperatorDep
from web.models.evidence import EvidenceKind, EvidenceOut, EvidencePage, LockIn, LockOut
from web.routers import video as video_routes
from web.routers.data_common import Reason, answering, asked, audit_read, audited, invalid
from web.services import evidence as service
from web.services.evidence import Evidence
from web.services.video import VideoService

router = APIRouter(prefix="/api/v1/evidence", tags=["evidence"])

KindPath = Annotated[EvidenceKind, Path(description="capture, hit or video")]
IdPath = Annotated[str, Path(min_length=1, max_length=1100,
                             description="a capture record id, a hit id, or a video's object key")]
Limit = Annotated[int, Query(ge=1, le=service.MAX_LIMIT)]


class _Footage:
    """The video routes' view of a service, over the evidence bucket: ``media`` serves locked footage."""

    def __init__(self, evidence: Evidence) -> None:
        self.media = evidence.footage


def _checked(kind: str, ident: str) -> str:
    with answering("path"):
        return service.check_id(kind, ident)


@router.post("", response_model=LockOut, status_code=status.HTTP_201_CREATED,
             responses={404: {"description": "no such item (or it has expired)"},
                        409: {"description": "already locked"}})
def lock(body: LockIn, user: OperatorDep, audit: AuditDep, evidence: EvidenceDep, data: DataDep) -> LockOut:
    """Lock a capture (record id), a hit (hit id) or a video (object key or ``s3://videos/`` URL) as evidence, with
    a required ``reason`` (a case number): kept past retention until an admin unlocks it."""
    if body.reason is None:
        raise invalid("body", "reason", "a reason (a case number or a short justification) is required to lock "
                                        "evidence")
    with answering("body"):
        ident = service.check_id(body.kind, body.id)
    detail = {"kind": body.kind, "id": ident}
    with answering("body"), audited(audit, user, "evidence.lock", service.target(body.kind, ident),
                                    detail, body.reason):
        return LockOut(**evidence.lock(body.kind, ident, body.reason, user.username, data.map.locate))


@router.get("", response_model=EvidencePage)
def locks(user: OperatorDep, audit: AuditDep, evidence: EvidenceDep, limit: Limit = 100,
          cursor: Annotated[str | None, Query(max_length=2400, description="the previous page's next")] = None,
          reason: Reason = None) -> EvidencePage:
    """The locks, newest first (without their records), ``limit`` per page; ``next`` is the following page's
    ``cursor``."""
    if cursor is not None:
        try:
            service.decode_cursor(cursor)
        except ValueError:
            raise invalid("query", "cursor", "not a cursor this API returned") from None
    audit_read(audit, user, "evidence.list", "", asked(limit=limit, cursor=cursor), reason)
    with answering("query"):
        items, following = evidence.locks(limit, cursor)
    return EvidencePage.model_validate({"items": items, "next": following})


@router.get("/video/{ident:path}/media", response_class=StreamingResponse,
            responses=video_routes.MEDIA_RESPONSES)
def media(ident: IdPath, user: OperatorDep, audit: AuditDep, evidence: EvidenceDep,
          range_: video_routes.RangeHeader = None, download: video_routes.Download = False,
          reason: Reason = None) -> Response:
    """The locked footage from the evidence bucket, served as ``/api/v1/video/media`` serves footage (ranges, its
    own type, ``nosniff``, a sandboxing CSP) and audited the same way (``video.view``; ``video.export``)."""
    key = _checked("video", ident)
    footage = cast(VideoService, _Footage(evidence))
    return video_routes.media(f"s3://{EVIDENCE_BUCKET}/{key}", user, audit, footage, range_, download, reason)


@router.get("/{kind}/{ident:path}", response_model=EvidenceOut, responses={404: {"description": "not locked"}})
def read(kind: KindPath, ident: IdPath, user: OperatorDep, audit: AuditDep, evidence: EvidenceDep,
         reason: Reason = None) -> EvidenceOut:
    """A lock with the item's record as it was when locked. Audited (``evidence.read``) before the lookup."""
    key = _checked(kind, ident)
    audit_read(audit, user, "evidence.read", service.target(kind, key), asked(kind=kind), reason)
    with answering("path"):
        return EvidenceOut(**evidence.read(kind, key))


@router.delete("/{kind}/{ident:path}", response_model=LockOut, responses={404: {"description": "not locked"}})
def unlock(kind: KindPath, ident: IdPath, user: AdminDep, audit: AuditDep, evidence: EvidenceDep,
           reason: Reason = None) -> LockOut:
    """Remove a lock (admin): the item's copy goes, a video's evidence copy too; the item itself, if still kept,
    expires with its retention again."""
    key = _checked(kind, ident)
    with answering("path"), audited(audit, user, "evidence.unlock", service.target(kind, key),
                                    {"kind": kind, "id": key}, reason):
        return LockOut(**evidence.unlock(kind, key))
