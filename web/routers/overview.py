"""``GET /api/v1/overview`` (viewer): ingest rates, latency, rejects, health, open alerts — from memory."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from web.auth import Role
from web.dependencies import OverviewDep, require_role
from web.models.overview import OverviewOut

router = APIRouter(prefix="/api/v1", tags=["overview"], dependencies=[Depends(require_role(Role.VIEWER))])


@router.get("/overview", response_model=OverviewOut)
def overview(overview: OverviewDep) -> OverviewOut:
    return overview.snapshot()
