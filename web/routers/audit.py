"""``GET /api/v1/audit`` (admin): the audit trail, newest first, with an opaque cursor per page, filtered by user,
action, a plate or record id (``q``) and a time range; ``GET /api/v1/audit/export.csv`` the same as CSV.

An export is itself an audited read (``audit.export``): the trail names people and what they looked for.
"""

from __future__ import annotations

import csv
import io
import json
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Query
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from pydantic import AwareDatetime

from web.audit import EXPORT_LIMIT, AuditFilter, BadCursor
from web.auth import Role
from web.dependencies import AdminDep, AuditDep, require_role
from web.models.audit import AuditEntry, AuditPage
from web.routers.data_common import invalid

router = APIRouter(prefix="/api/v1", tags=["audit"], dependencies=[Depends(require_role(Role.ADMIN))])

CSV_COLUMNS = ("time", "user", "role", "action", "target", "query", "reason", "client", "user_agent", "outcome")


def _ms(moment: datetime | None) -> int | None:
    return None if moment is None else round(moment.timestamp() * 1000)


def audit_filter(user: Annotated[str | None, Query(min_length=1, max_length=100)] = None,
                 action: Annotated[str | None, Query(min_length=1, max_length=60)] = None,
                 q: Annotated[str | None, Query(min_length=1, max_length=200,
                                                description="a plate, record id, URL or any text of the query, "
                                                            "target or reason")] = None,
                 from_: Annotated[AwareDatetime | None, Query(alias="from", description="ISO-8601 with offset, "
                                                                                       "inclusive")] = None,
                 to: Annotated[AwareDatetime | None, Query(description="ISO-8601 with offset, exclusive")] = None,
                 ) -> AuditFilter:
    if from_ is not None and to is not None and to <= from_:
        raise invalid("query", "to", "must be after from")
    return AuditFilter(user=user, action=action, q=q, start_ms=_ms(from_), end_ms=_ms(to))


FilterDep = Annotated[AuditFilter, Depends(audit_filter)]


@router.get("/audit", response_model=AuditPage)
def audit_page(audit: AuditDep, where: FilterDep, limit: Annotated[int, Query(ge=1, le=500)] = 50,
               cursor: Annotated[str | None, Query(max_length=200)] = None) -> AuditPage:
    try:
        items, following = audit.log.page(limit, cursor, where)
    except BadCursor as exc:
        raise RequestValidationError([{"type": "value_error", "loc": ("query", "cursor"), "msg": str(exc),
                                       "input": cursor}]) from None
    return AuditPage(items=items, next=following)


def _csv(entries: list[AuditEntry]) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(CSV_COLUMNS)
    for entry in entries:
        row = entry.model_dump()
        row["query"] = json.dumps(row["query"], ensure_ascii=False)
        writer.writerow(_cell(row[column]) for column in CSV_COLUMNS)
    return out.getvalue()


def _cell(value: object) -> str:
    """A CSV cell a spreadsheet shows as text: a leading = + - @ would make it a formula (CSV injection)."""
    text = "" if value is None else str(value)
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


@router.get("/audit/export.csv", response_class=Response,
            responses={200: {"content": {"text/csv": {}}, "description": f"up to {EXPORT_LIMIT} entries"}})
def audit_export(user: AdminDep, audit: AuditDep, where: FilterDep) -> Response:
    """The matching entries (newest first, at most ``EXPORT_LIMIT``) as CSV, one column per field."""
    audit.record(user, "audit.export", "", {k: v for k, v in vars(where).items() if v is not None})
    body = _csv(audit.log.entries(where))
    return Response(body, media_type="text/csv; charset=utf-8",
                    headers={"Content-Disposition": 'attachment; filename="audit.csv"'})
