"""``/api/v1/evidence``: evidence locks (a capture, a hit or a video kept past retention until an admin unlocks it)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from contracts.audit import REASON_MAX

EvidenceKind = Literal["capture", "hit", "video"]


class LockIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: EvidenceKind
    id: Annotated[str, Field(min_length=1, max_length=1100,
                             description="a capture record id, a hit id, or a video's key or s3://videos/ URL")]
    reason: Annotated[str | None, StringConstraints(strip_whitespace=True, min_length=1, max_length=REASON_MAX),
                      Field(description=f"why (a case number, 1 to {REASON_MAX} characters): required, kept in "
                                        "the lock and the audit trail")] = None


class LockOut(BaseModel):
    kind: EvidenceKind
    id: str
    """The record id, the hit id, or the video's object key (its locked copy: ``s3://evidence/<id>``)."""
    reason: str
    locked_by: str
    locked_at: str
    """ISO-8601 with offset."""


class EvidenceOut(LockOut):
    record: dict[str, Any]
    """The item as the console showed it when it was locked (capture record, hit, video metadata)."""


class EvidencePage(BaseModel):
    items: list[LockOut]
    """Newest lock first."""
    next: str | None
    """Opaque cursor of the next (older) page, or null at the end."""
