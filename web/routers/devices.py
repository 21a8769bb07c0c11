"""``/api/v1/map``, ``/api/v1/devices``, ``/api/v1/checkpoints/{id}`` (viewer): the deployment map and its devices.

A missing or unreadable map file is a 503 naming the ``map`` backend (the simulator or the asset
register has not written it yet), like any other backend the console cannot reach.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Path, Query, status

from contracts.deployment_map import MapError
from contracts.records import is_checkpoint_id
from web.auth import Role
from web.backends import BackendUnavailable
from web.dependencies import BackendsDep, DataDep, require_role
from web.models.devices import CheckpointDetail, DeploymentMapOut, DeviceOut
from web.routers.data_common import invalid
from web.services import captures, deployment
from web.services.deployment import Loaded

router = APIRouter(prefix="/api/v1", tags=["devices"], dependencies=[Depends(require_role(Role.VIEWER))])

MAP = "map"


def _loaded(data: DataDep) -> Loaded:
    try:
        return data.map.current()
    except MapError as exc:
        raise BackendUnavailable(MAP, str(exc)) from None


@router.get("/map", response_model=DeploymentMapOut)
def deployment_map(data: DataDep) -> DeploymentMapOut:
    """Districts, checkpoints (with coordinates), devices and recognition servers."""
    return DeploymentMapOut(**_loaded(data).map.to_json())


@router.get("/devices", response_model=list[DeviceOut])
def devices(data: DataDep,
            checkpoint: Annotated[str | None, Query(max_length=40)] = None) -> list[DeviceOut]:
    """Every camera with its checkpoint's location (or those of one checkpoint)."""
    if checkpoint is not None and not is_checkpoint_id(checkpoint):
        raise invalid("query", "checkpoint", "not a checkpoint id (e.g. 330102#1#0#0)")
    return [DeviceOut(**d) for d in deployment.devices(_loaded(data), checkpoint)]


@router.get("/checkpoints/{checkpoint_id}", response_model=CheckpointDetail)
def checkpoint(checkpoint_id: Annotated[str, Path(max_length=40, description="URL-encode '#' as %23")],
               data: DataDep, backends: BackendsDep,
               latest: Annotated[int, Query(ge=0, le=captures.MAX_LIMIT)] = 20) -> CheckpointDetail:
    """A checkpoint's panel: where it is, its devices, its newest captures."""
    if not is_checkpoint_id(checkpoint_id):
        raise invalid("path", "checkpoint_id", "not a checkpoint id (e.g. 330102#1#0#0, '#' sent as %23)")
    loaded = _loaded(data)
    found = loaded.checkpoints.get(checkpoint_id)
    if found is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"checkpoint not in the deployment map: {checkpoint_id}")
    items = []
    if latest:
        with backends.hbase() as conn:  # in the route's thread (see web/routers/captures.py)
            items = captures.checkpoint_captures(conn, checkpoint_id, None, None, latest, None, data.map.locate).items
    return CheckpointDetail.model_validate({
        "checkpoint": asdict(found), "location": deployment.location(loaded, checkpoint_id),
        "devices": deployment.devices(loaded, checkpoint_id), "latest": items})
