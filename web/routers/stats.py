"""``/api/v1/stats``: live statistics (viewers read, operators start and stop, every command audited).

Starting publishes a statistic command on ``control.stats``, stopping a tombstone; results are what the
service publishes on ``surveillance.stats`` (the last hour's, folded in memory), and pages follow them
live over the SSE hub. A statistic grouped by lane has groups ``<checkpoint id>/lane-<n>``; its results also
carry the checkpoint and lane, and the lane count of each checkpoint on the deployment map.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, status

from web.dependencies import AuditDep, DataDep, OperatorDep, SurveillanceDep, ViewerDep
from web.models.surveillance import StatIn, StatOut, StatResults
from web.routers.data_common import answering, audited
from web.services import surveillance

router = APIRouter(prefix="/api/v1", tags=["surveillance"])

StatId = Annotated[str, Path(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$")]


@router.get("/stats", response_model=list[StatOut])
def stats(_user: ViewerDep, sv: SurveillanceDep) -> list[StatOut]:
    """Running statistics, newest first, with the service's verdict on each."""
    return [StatOut(**s) for s in sv.stats()]


@router.post("/stats", response_model=StatOut, status_code=status.HTTP_201_CREATED)
def start_stat(body: StatIn, user: OperatorDep, audit: AuditDep, sv: SurveillanceDep, data: DataDep) -> StatOut:
    """Start a statistic: ``measure`` per ``group_by`` (``lane``, ``checkpoint``, ``district``, ``city``) over tumbling
    ``window_s`` windows, optionally filtered. A ``checkpoint_id`` or ``lane`` filter must name a checkpoint and a
    lane the deployment map has (422 ``filter.checkpoint_id`` / ``filter.lane``; 503 ``map`` when the map cannot be
    read); face captures have no lane (``group_by`` ``lane`` with ``face_count`` is a 422 naming ``group_by``)."""
    detail = body.model_dump(exclude_none=True)
    with answering("body"), audited(audit, user, "stat.start", body.measure, detail):
        return StatOut(**sv.add_stat(detail, user.username, lambda: surveillance.map_lanes(data.map)))


@router.delete("/stats/{stat_id}", response_model=StatOut)
def stop_stat(stat_id: StatId, user: OperatorDep, audit: AuditDep, sv: SurveillanceDep) -> StatOut:
    with answering("path"), audited(audit, user, "stat.stop", stat_id, {}):
        return StatOut(**sv.remove_stat(stat_id))


@router.get("/stats/{stat_id}/results", response_model=StatResults)
def results(stat_id: StatId, _user: ViewerDep, sv: SurveillanceDep, data: DataDep) -> StatResults:
    """The last hour's values per window and group; a lane statistic's also name each checkpoint's lanes."""
    with answering("path"):
        return StatResults.model_validate({"stat": sv.stat(stat_id), "results": sv.results(stat_id),
                                           "lanes": sv.lane_counts(stat_id, data.map)})
