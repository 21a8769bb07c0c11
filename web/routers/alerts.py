"""``/api/v1/alerts`` (viewer; acknowledge: operator) and ``/api/v1/silences`` (viewer reads, admin changes).

Alerts are the monitor's (``monitoring.queries.alerts``), or a real Alertmanager's (``GET /api/v2/alerts``)
when the console is pointed at one (``[console] alertmanager_url`` or the monitor's ``alertmanager``
receiver); live changes reach pages over the SSE hub's ``alerts`` topic. Silences are written where the
monitor reads them every evaluation (the built-in engine's; Alertmanager's are made with amtool or its UI).
Every command is audited with who, what and how it ended.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, status

from web.dependencies import AdminDep, AuditDep, DataDep, OperatorDep, ViewerDep
from web.models.alerts import AlertOut, SilenceIn, SilenceOut
from web.routers.data_common import answering, audited

router = APIRouter(prefix="/api/v1", tags=["alerts"])

Fingerprint = Annotated[str, Path(pattern=r"^[0-9a-f]{16}$", description="16 hex digits, as Alertmanager's")]
SilenceId = Annotated[str, Path(pattern=r"^[0-9a-f]{32}$")]


@router.get("/alerts", response_model=list[AlertOut])
def alerts(_user: ViewerDep, data: DataDep,
           resolved: Annotated[bool, Query(description="also the recently resolved ones")] = False) -> list[AlertOut]:
    """Firing alerts (active, or suppressed by a silence or inhibition), oldest first, with their acknowledgement."""
    return [AlertOut(**a) for a in data.monitoring.alerts(include_resolved=resolved)]


@router.post("/alerts/{fingerprint}/ack", response_model=AlertOut)
def acknowledge(fingerprint: Fingerprint, user: OperatorDep, audit: AuditDep, data: DataDep) -> AlertOut:
    """Take an open alert's incident (who and when are kept); 404 unknown, 409 already resolved."""
    with answering("path"), audited(audit, user, "alert.ack", fingerprint, {}):
        return AlertOut(**data.monitoring.acknowledge(fingerprint, user.username))


@router.get("/silences", response_model=list[SilenceOut])
def silences(_user: ViewerDep, data: DataDep) -> list[SilenceOut]:
    """Active first, then pending, then expired (kept, as Alertmanager keeps them, for the record)."""
    return [SilenceOut(**s) for s in data.monitoring.silences()]


@router.post("/silences", response_model=SilenceOut, status_code=status.HTTP_201_CREATED)
def create_silence(body: SilenceIn, user: AdminDep, audit: AuditDep, data: DataDep) -> SilenceOut:
    """Mute the alerts its matchers select between startsAt (default now) and endsAt; the author is the caller."""
    detail = body.model_dump(mode="json")
    starts = body.startsAt.timestamp() if body.startsAt is not None else None
    target = ", ".join(m.text() for m in body.matchers)
    with answering("body"), audited(audit, user, "silence.create", target, detail):
        created = data.monitoring.create_silence([m.matcher() for m in body.matchers], starts, body.endsAt.timestamp(),
                                                 user.username, body.comment)
    return SilenceOut(**created)


@router.delete("/silences/{silence_id}", response_model=SilenceOut)
def expire_silence(silence_id: SilenceId, user: AdminDep, audit: AuditDep, data: DataDep) -> SilenceOut:
    """End a silence now (its record stays, expired)."""
    with answering("path"), audited(audit, user, "silence.expire", silence_id, {}):
        return SilenceOut(**data.monitoring.expire_silence(silence_id))
