"""``GET /api/v1/overview`` (viewer): ingest rates, latency, rejects, health, open alerts — from memory."""

from __future__ import annotations

from fastapi import APIRouter, Request

from web.dependencies import ViewerDep
from web.models.overview import OverviewOut

router = APIRouter(prefix="/api/v1", tags=["overview"])


@router.get("/overview", response_model=OverviewOut)
def overview(_user: ViewerDep, request: Request) -> OverviewOut:
    return request.app.state.overview.snapshot()
