"""``/api/v1/bus/*``: brokers, topics, messages, consumer groups and lag (viewer); topic and offset commands (admin).

Every admin command is recorded in the audit trail with its outcome, refused or not. Reading a topic's messages
is audited too (``topic.messages``, before they are fetched): raw records carry plates, faces and hits.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, status

from web.dependencies import AdminDep, AuditDep, BackendsDep, DataDep, SettingsDep, ViewerDep
from web.models.bus import (
    TOPIC_PATTERN,
    Cluster,
    GroupDetail,
    GroupSummary,
    LagHistory,
    Message,
    OffsetChange,
    OffsetReset,
    TopicCreate,
    TopicDetail,
    TopicSummary,
)
from web.redaction import NoControlTopicsForViewers, message_for
from web.routers.data_common import Reason, answering, asked, audit_read, audited
from web.services import bus, groups, messages

router = APIRouter(prefix="/api/v1/bus", tags=["bus"])

TopicPath = Annotated[str, Path(pattern=TOPIC_PATTERN)]
GroupPath = Annotated[str, Path(min_length=1, max_length=255)]


@router.get("/brokers", response_model=Cluster)
def brokers(_user: ViewerDep, backends: BackendsDep) -> Cluster:
    return Cluster(**bus.brokers(backends))


@router.get("/topics", response_model=list[TopicSummary])
def topics(_user: ViewerDep, backends: BackendsDep, data: DataDep,
           internal: Annotated[bool, Query(description="include __consumer_offsets and the like")] = False,
           ) -> list[TopicSummary]:
    return [TopicSummary(**t) for t in bus.topics(backends, data.log_dirs, include_internal=internal)]


@router.get("/topics/{name}", response_model=TopicDetail)
def topic(name: TopicPath, _user: ViewerDep, backends: BackendsDep, data: DataDep) -> TopicDetail:
    with answering("path"):
        return TopicDetail(**bus.topic(backends, data.log_dirs, name))


@router.get("/topics/{name}/messages", response_model=list[Message])
def topic_messages(name: TopicPath, user: ViewerDep, audit: AuditDep, backends: BackendsDep,
                   _control: NoControlTopicsForViewers,
                   limit: Annotated[int, Query(ge=1, le=messages.MAX_LIMIT)] = 50,
                   partition: Annotated[int | None, Query(ge=0)] = None, reason: Reason = None) -> list[Message]:
    """The latest ``limit`` messages (of one partition, or of all by timestamp), newest first (a viewer: no
    control topic, 403, and no face feature vectors)."""
    audit_read(audit, user, "topic.messages", name, asked(limit=limit, partition=partition), reason)
    with answering("query"):
        return [Message(**message_for(user, m)) for m in messages.latest(backends, name, limit, partition)]


@router.post("/topics", response_model=TopicDetail, status_code=status.HTTP_201_CREATED)
def create_topic(body: TopicCreate, user: AdminDep, audit: AuditDep, backends: BackendsDep,
                 data: DataDep) -> TopicDetail:
    detail = body.model_dump(exclude={"name"})
    with answering("body"), audited(audit, user, "topic.create", body.name, detail):
        bus.create_topic(backends, body.name, body.partitions, body.replication_factor, body.config)
    with answering("path"):
        return TopicDetail(**bus.created_topic(backends, data.log_dirs, body.name))


@router.delete("/topics/{name}", status_code=status.HTTP_204_NO_CONTENT)
def delete_topic(name: TopicPath, user: AdminDep, audit: AuditDep, backends: BackendsDep) -> None:
    with answering("path"), audited(audit, user, "topic.delete", name, {}):
        bus.delete_topic(backends, name)


@router.get("/groups", response_model=list[GroupSummary])
def list_groups(_user: ViewerDep, backends: BackendsDep) -> list[GroupSummary]:
    return [GroupSummary(**g) for g in groups.groups(backends)]


@router.get("/groups/{group_id}", response_model=GroupDetail)
def group(group_id: GroupPath, _user: ViewerDep, backends: BackendsDep) -> GroupDetail:
    with answering("path"):
        return GroupDetail(**groups.group(backends, group_id))


@router.get("/groups/{group_id}/lag-history", response_model=LagHistory)
def lag_history(group_id: GroupPath, _user: ViewerDep, backends: BackendsDep, data: DataDep, settings: SettingsDep,
                minutes: Annotated[int, Query(ge=1, le=24 * 60)] = 60) -> LagHistory:
    """The group's lag sampled by the console every ``lag_sample_interval_s`` (default 30 s), oldest first."""
    points = data.lag_history.history(group_id, minutes * 60_000)
    if not points:
        with answering("path"):
            groups.group(backends, group_id)  # 404 for a group that does not exist; else no sample yet
    return LagHistory.model_validate({"group_id": group_id, "interval_s": settings.lag_sample_interval_s,
                                      "points": points})


@router.post("/groups/{group_id}/reset-offsets", response_model=list[OffsetChange])
def reset_offsets(group_id: GroupPath, body: OffsetReset, user: AdminDep, audit: AuditDep,
                  backends: BackendsDep) -> list[OffsetChange]:
    """Move an inactive group's committed offsets (409 while it has members, as Kafka refuses)."""
    spec = groups.ResetSpec(to=body.to, topic=body.topic,
                            partitions=tuple(body.partitions) if body.partitions is not None else None,
                            time_ms=round(body.datetime.timestamp() * 1000) if body.datetime else None,
                            offset=body.offset)
    with answering("body"), audited(audit, user, "group.reset_offsets", group_id, body.model_dump(mode="json")):
        changes = groups.reset_offsets(backends, group_id, spec)
    return [OffsetChange(**c) for c in changes]
