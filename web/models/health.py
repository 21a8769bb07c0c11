"""``GET /api/v1/health``: each backend up or down, with the error a person can act on."""

from __future__ import annotations

from pydantic import BaseModel


class BackendHealth(BaseModel):
    up: bool
    error: str | None = None


class Health(BaseModel):
    bus: BackendHealth
    hbase: BackendHealth
    object_store: BackendHealth


class ErrorResponse(BaseModel):
    """Every 4xx/5xx body: FastAPI's ``detail``, plus the backend's name on a 503."""

    detail: str
    backend: str | None = None
