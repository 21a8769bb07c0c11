"""``GET /api/v1/audit`` (admin): the audit trail, newest first, with an opaque cursor per page."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.exceptions import RequestValidationError

from web.audit import BadCursor
from web.dependencies import AdminDep, AuditDep
from web.models.audit import AuditPage

router = APIRouter(prefix="/api/v1", tags=["audit"])


@router.get("/audit", response_model=AuditPage)
def audit_page(_user: AdminDep, audit: AuditDep, limit: Annotated[int, Query(ge=1, le=500)] = 50,
               cursor: Annotated[str | None, Query(max_length=100)] = None) -> AuditPage:
    try:
        items, following = audit.page(limit, cursor)
    except BadCursor as exc:
        raise RequestValidationError([{"type": "value_error", "loc": ("query", "cursor"), "msg": str(exc),
                                       "input": cursor}]) from None
    return AuditPage(items=items, next=following)
