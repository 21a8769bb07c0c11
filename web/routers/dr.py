"""``/api/v1/dr/*``: the DR page's API. Viewers read which site is active, lag, the image copier's state, checkpoints
and drill reports; admins start drills.

A drill starts two throw-away sites of its own (`python -m dr_mirror.drill`), so it never touches the
running DR site; it is still a heavy job for the machine, hence admin-only, audited and one at a time.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Path, status
from fastapi.responses import FileResponse, PlainTextResponse
from pydantic import BaseModel, Field

from dr_mirror.lag import rpo_now
from web.dependencies import AdminDep, AuditDep, DrDep, ViewerDep
from web.models.dr import (
    CheckpointOut,
    DrillReport,
    DrillRunning,
    DrillStart,
    DrillSummary,
    LagNow,
    LagSample,
    Rpo,
    SwitchoverRunning,
    SwitchoverStart,
)
from web.routers.data_common import answering, audited

router = APIRouter(prefix="/api/v1/dr", tags=["dr"])

ReportName = Annotated[str, Path(max_length=128, description="a drill report's directory name")]


class ImagesNow(BaseModel):
    """The DR image copier now (``python -m dr_mirror.images``, its /metrics), and the footage it copies."""

    lag_records: int | None
    """Records on the mirrored capture topics whose image the copier has not handled yet (None: not measured yet)."""
    lag_seconds: float | None
    """Now minus the capture time of the last record handled while records wait (0 when none wait; None: not
    measured yet)."""
    copied: int
    """Images copied to the DR site's store since the copier started."""
    missing_at_source: int
    """Records whose image the primary's store does not have (never uploaded, or expired): nothing to copy."""
    skipped: dict[str, int]
    """Records not copied, by reason (present, no_image, malformed, foreign, missing_at_source, error)."""
    videos_pending: int | None = None
    """The cameras' footage segments at the primary not yet copied (None: not measured yet, or no footage copy)."""
    videos_lag_seconds: float | None = None
    """Now minus the start time of the oldest segment waiting (0 when none wait)."""
    videos_copied: int | None = None
    """Footage segments copied since the copier started (None: it copies no footage)."""


class LastSwitchover(BaseModel):
    """What the last switchover measured (`python -m dr_mirror switchover`)."""

    planned: bool
    """Planned: the site left answered, was fenced and drained; unplanned: it was lost."""
    from_: Literal["primary", "dr"] = Field(alias="from")
    """The site it left."""
    records_lost: int | None
    """0 for a planned one; the mirror's lag when the site was lost for an unplanned one (None: unknown)."""
    switch_s: float
    """Seconds from the command to the new site active (the switch's own RTO)."""
    drained_s: float | None = None
    seconds_lost: float | None = None
    """The span of writes lost (an unplanned one)."""


class ActiveSite(BaseModel):
    """Which site runs the business (``DATA/dr/active-site.json``, which a switchover changes)."""

    active: Literal["primary", "dr"]
    since: str | None
    """When it became the active site (ISO 8601 with its offset); None when no record was written yet."""
    reason: str
    switching_to: Literal["primary", "dr"] | None
    """The site a switchover under way is moving the business to (neither site's services act meanwhile)."""
    last: LastSwitchover | None
    """The figures of the last switchover, None before the first."""


@router.get("/site", response_model=ActiveSite)
def site(_user: ViewerDep, dr: DrDep) -> ActiveSite:
    """Which site is active, since when and why (503 ``active_site`` when the record is damaged)."""
    return ActiveSite(**dr.active_site())


@router.post("/switchover", response_model=SwitchoverRunning, status_code=status.HTTP_202_ACCEPTED)
def start_switchover(body: SwitchoverStart, user: AdminDep, audit: AuditDep, dr: DrDep) -> SwitchoverRunning:
    """Move the business to the other site, or back (admin, with a reason; audited; 409 while the one this console
    started runs). The command drains and switches in seconds; ``GET /switchover`` follows it."""
    with answering("body"), audited(audit, user, "dr.switchover", body.to, {"force": body.force}, body.reason):
        return SwitchoverRunning(**dr.start_switchover(body.to, body.reason, body.force))


@router.get("/switchover", response_model=SwitchoverRunning | None)
def switchover(_user: AdminDep, dr: DrDep) -> SwitchoverRunning | None:
    """The switchover this console started last: running, its exit code (0 switched, 1 refused: nothing changed) and
    what it said (null when none was started)."""
    state = dr.switchover_state()
    return None if state is None else SwitchoverRunning(**state)


@router.get("/lag", response_model=LagNow)
def lag(_user: ViewerDep, dr: DrDep) -> LagNow:
    """The mirror's lag per topic and partition now, in records and seconds, and the RPO that losing the primary now
    would cost (503 ``dr_mirror`` when the mirror does not answer)."""
    partitions = dr.lag_now()
    return LagNow(total=sum(p["lag"] for p in partitions), partitions=partitions, rpo=Rpo(**rpo_now(partitions)))


@router.get("/images", response_model=ImagesNow)
def images(_user: ViewerDep, dr: DrDep) -> ImagesNow:
    """The DR image copier's lag and counts now (503 ``dr_images`` when it does not answer)."""
    return ImagesNow(**dr.images_now())


@router.get("/lag/history", response_model=list[LagSample])
def lag_history(_user: ViewerDep, dr: DrDep) -> list[LagSample]:
    """The last hour of the mirror's lag, sampled by the console, oldest first."""
    return [LagSample(**s) for s in dr.history()]


@router.get("/checkpoints", response_model=list[CheckpointOut])
def checkpoints(_user: ViewerDep, dr: DrDep) -> list[CheckpointOut]:
    """The newest checkpoint per group and partition (what a group resumes from on DR after a failover)."""
    return [CheckpointOut(**c) for c in dr.checkpoints()]


@router.get("/drills", response_model=list[DrillSummary])
def drills(_user: ViewerDep, dr: DrDep) -> list[DrillSummary]:
    """Finished drills, newest first, with their figures."""
    return [DrillSummary(**r) for r in dr.reports()]


@router.get("/drills/running", response_model=DrillRunning | None)
def running(_user: ViewerDep, dr: DrDep) -> DrillRunning | None:
    """The drill this console started last, whether it still runs (null when none was started)."""
    state = dr.running()
    return None if state is None else DrillRunning(**state)


@router.post("/drills", response_model=DrillRunning, status_code=status.HTTP_202_ACCEPTED)
def start_drill(body: DrillStart, user: AdminDep, audit: AuditDep, dr: DrDep) -> DrillRunning:
    """Start a drill (admin; 409 while another runs); its report appears in the list when it ends."""
    detail = body.model_dump()
    with answering("body"), audited(audit, user, "dr.drill.start", body.scenario, detail):
        name = dr.start_drill(body.scenario, body.ingest)
    return DrillRunning(name=name, running=True, exit_code=None)


@router.get("/drills/{name}", response_model=DrillReport)
def drill(name: ReportName, _user: ViewerDep, dr: DrDep) -> DrillReport:
    with answering("path"):
        return DrillReport(**dr.report(name))


@router.get("/drills/{name}/{kind}", response_model=None)
def drill_file(name: ReportName, kind: Literal["json", "md", "png"], _user: ViewerDep,
               dr: DrDep) -> FileResponse | PlainTextResponse:
    """The report's files as the drill wrote them: drill.json, drill.md (text/markdown), drill.png."""
    with answering("path"):
        path = dr.report_file(name, kind)
    if kind == "md":
        return PlainTextResponse(path.read_text(), media_type="text/markdown; charset=utf-8")
    return FileResponse(path, media_type={"json": "application/json", "png": "image/png"}[kind])
