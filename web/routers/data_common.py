"""What the data routers (captures, devices, bus, video, watchlist) share: service errors as HTTP, the audit of
commands, and the audit of reads of personal data (with the reason a user gives for them)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import datetime
from enum import Enum
from typing import Annotated, Any, Literal

from fastapi import HTTPException, Query, status
from fastapi.exceptions import RequestValidationError
from pydantic import StringConstraints

from contracts.audit import REASON_MAX
from web.audit import RequestAudit
from web.backends import BackendUnavailable
from web.models.auth import UserOut
from web.services.errors import Conflict, Forbidden, Invalid, NotFound


def invalid(where: Literal["query", "body", "path"], field: str, message: str) -> RequestValidationError:
    """A 422 in FastAPI's own shape (``detail[].loc`` names the field), for checks a model cannot make."""
    return RequestValidationError([{"type": "value_error", "loc": (where, field), "msg": message, "input": None}])


@contextlib.contextmanager
def answering(where: Literal["query", "body", "path"] = "query") -> Iterator[None]:
    """Service refusals as HTTP: NotFound 404, Conflict 409, Invalid 422 naming the field (in ``where``)."""
    try:
        yield
    except NotFound as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from None
    except Conflict as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from None
    except Invalid as exc:
        raise invalid(where, exc.field, str(exc)) from None


@contextlib.contextmanager
def audited(audit: RequestAudit, user: UserOut, action: str, target: str, detail: dict[str, Any],
            reason: str | None = None) -> Iterator[None]:
    """Record a command (with its ``reason``, if given) in the audit trail however it ends: ok, refused (the user's
    error, or the bus's ACLs) or failed (a backend)."""
    try:
        yield
    except (NotFound, Conflict, Invalid, Forbidden) as exc:
        audit.record(user, action, target, detail, f"refused: {exc}", reason=reason)
        raise
    except BackendUnavailable as exc:
        audit.record(user, action, target, detail, f"failed: {exc}", reason=reason)
        raise
    audit.record(user, action, target, detail, reason=reason)


Reason = Annotated[
    Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=REASON_MAX)] | None,
    Query(description=f"why (a case number or a short justification, 1 to {REASON_MAX} characters): kept in the "
                      "audit trail with the read"),
]
"""The ``reason`` query parameter of a read of personal data. Optional here: the routes that must have one (a
search by plate, a video export) say so with :func:`required_reason`, after FastAPI's own checks, so a request
with another mistake gets the usual 422 for it alone."""


def required_reason(reason: str | None, what: str) -> str:
    """``reason``, or a 422 naming ``reason`` in FastAPI's shape: ``what`` needs a justification in the trail."""
    if reason is None:
        raise invalid("query", "reason", f"a reason (a case number or a short justification) is required {what}")
    return reason


def asked(**params: Any) -> dict[str, Any]:
    """A request's parameters as its audit event records them: the ones given (None dropped), datetimes as
    ISO-8601 and enums as their values, so the event holds what was asked in plain JSON, never what was found."""
    def plain(value: Any) -> Any:
        if isinstance(value, datetime):
            return value.isoformat()
        return value.value if isinstance(value, Enum) else value

    return {name: plain(value) for name, value in params.items() if value is not None}


def audit_read(audit: RequestAudit, user: UserOut, action: str, target: str, query: dict[str, Any],
               reason: str | None = None) -> None:
    """Record a read of personal data *before* it is fetched: if the event cannot be published this raises
    BackendUnavailable("audit") (a 503) and the route serves nothing. The route calls it once, after its own
    validation (a 422 is not a read), so each request leaves exactly one event."""
    audit.record(user, action, target, query, reason=reason)
