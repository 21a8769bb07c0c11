"""What the data routers (captures, devices, bus) share: their services object and service errors as HTTP."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Annotated, Any, Literal

from fastapi import Depends, HTTPException, Request, status
from fastapi.exceptions import RequestValidationError

from web.audit import RequestAudit
from web.backends import BackendUnavailable
from web.models.auth import UserOut
from web.services.errors import Conflict, Invalid, NotFound
from web.services.runtime import DataServices


def get_data(request: Request) -> DataServices:
    return request.app.state.data


DataDep = Annotated[DataServices, Depends(get_data)]


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
def audited(audit: RequestAudit, user: UserOut, action: str, target: str, detail: dict[str, Any]) -> Iterator[None]:
    """Record a command in the audit trail however it ends: ok, refused (the user's error) or failed (a backend)."""
    try:
        yield
    except (NotFound, Conflict, Invalid) as exc:
        audit.record(user, action, target, detail, f"refused: {exc}")
        raise
    except BackendUnavailable as exc:
        audit.record(user, action, target, detail, f"failed: {exc}")
        raise
    audit.record(user, action, target, detail)
