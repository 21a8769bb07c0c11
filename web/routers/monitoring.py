"""``/api/v1/monitoring/*`` (viewer): latency trend and quality per hour of a day, device health.

Read from what the monitor keeps in HBase (``monitoring.queries``), so a whole day draws after either
process restarts. ``day`` is the city's local date.
"""

from __future__ import annotations

import ipaddress
from datetime import date
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query
from pydantic import AfterValidator

from web.auth import Role
from web.dependencies import DataDep, require_role
from web.models.monitoring import DeviceHealth, LatencyPoint, QualityPoint
from web.routers.data_common import answering, invalid

router = APIRouter(prefix="/api/v1/monitoring", tags=["monitoring"], dependencies=[Depends(require_role(Role.VIEWER))])
# HBase is taken inside each sync route, never through a generator dependency (see web/routers/captures.py).


def _ip(value: str | None) -> str | None:
    if value is not None:
        ipaddress.ip_address(value)  # ValueError -> 422 naming the field
    return value


Day = Annotated[date, Query(description="the city's local date, YYYY-MM-DD")]
DeviceIp = Annotated[str | None, Query(max_length=45, description="one device's curves"), AfterValidator(_ip)]
RecognizerIp = Annotated[str | None, Query(max_length=45, description="one recognition server's curves"),
                         AfterValidator(_ip)]


@router.get("/latency", response_model=list[LatencyPoint])
def latency(day: Day, data: DataDep) -> list[LatencyPoint]:
    """24 hourly points: p50/p95/p99 of capture -> ingest, and of every stage (the book's figure 10-6)."""
    return [LatencyPoint(**p) for p in data.monitoring.latency(day)]


@router.get("/quality", response_model=list[QualityPoint])
def quality(day: Day, data: DataDep, device_ip: DeviceIp = None,
            recognizer_ip: RecognizerIp = None) -> list[QualityPoint]:
    """24 hourly points of produced vs valid (and unrecognized, invalid) for the city, a device or a recogniser."""
    if device_ip and recognizer_ip:
        raise invalid("query", "recognizer_ip", "give device_ip or recognizer_ip, not both")
    with answering("query"):
        return [QualityPoint(**p) for p in data.monitoring.quality(day, device_ip, recognizer_ip)]


@router.get("/devices", response_model=list[DeviceHealth])
def devices(data: DataDep) -> list[DeviceHealth]:
    """Every device: healthy / degraded / silent / recovering, where it is and its recogniser (figure 10-9)."""
    return [DeviceHealth(**d) for d in data.monitoring.devices()]


@router.get("/devices/{device_ip}", response_model=DeviceHealth)
def device(device_ip: Annotated[str, Path(max_length=45), AfterValidator(_ip)],
           data: DataDep) -> DeviceHealth:
    """One device's health (404 when neither the map nor the monitor knows it)."""
    with answering("path"):
        return DeviceHealth(**data.monitoring.device(device_ip))
