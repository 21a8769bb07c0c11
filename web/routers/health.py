"""Health of the backends: open to anyone (load balancers and `make up` poll it)."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool

from web.dependencies import BackendsDep
from web.models.health import BackendHealth, Health

router = APIRouter(prefix="/api/v1", tags=["health"])


@router.get("/health", response_model=Health)
async def health(backends: BackendsDep) -> Health:
    errors = await run_in_threadpool(backends.health)
    return Health(**{name: BackendHealth(up=error is None, error=error) for name, error in errors.items()})
