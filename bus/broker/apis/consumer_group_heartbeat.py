"""ConsumerGroupHeartbeat (68): the KIP-848 consumer protocol (librdkafka's `group.protocol=consumer`).

Needs READ on the group (GROUP_AUTHORIZATION_FAILED), as every member request does.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.apis._groups import client_host
from bus.broker.context import RequestContext
from bus.coordinator.group.consumer.coordinator import HeartbeatError, HeartbeatRequest, owned_from_request
from bus.security.acls import AclOperation, ResourceType

API_KEY = 68
MIN_VERSION = 0
MAX_VERSION = 1


def handle(ctx: RequestContext, request: Any) -> Any:
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return ctx.make("ConsumerGroupHeartbeatResponse", throttle_time=0,
                        error_code=ErrorCode.group_authorization_failed, member_epoch=-1, heartbeat_interval=0,
                        assignment=None)
    coordinator = ctx.consumer_groups
    req = HeartbeatRequest(
        group_id=request.group_id,
        member_id=request.member_id,
        member_epoch=request.member_epoch,
        instance_id=request.instance_id,
        rack_id=request.rack_id,
        rebalance_timeout_ms=int(request.rebalance_timeout.total_seconds() * 1000),
        subscribed_topic_names=None if request.subscribed_topic_names is None else list(request.subscribed_topic_names),
        subscribed_topic_regex=getattr(request, "subscribed_topic_regex", None),
        server_assignor=request.server_assignor,
        owned=owned_from_request(request.topic_partitions),
        client_id=ctx.client_id or "",
        client_host=client_host(ctx),
        generates_member_id=ctx.api_version == 0,
    )
    error = ctx.groups.coordinator_error(req.group_id)
    if error is not None:
        return ctx.make("ConsumerGroupHeartbeatResponse", throttle_time=0, error_code=error, member_epoch=-1,
                        heartbeat_interval=0, assignment=None)
    try:
        result = coordinator.heartbeat(req)
    except HeartbeatError as exc:
        return ctx.make("ConsumerGroupHeartbeatResponse", throttle_time=0, error_code=exc.code,
                        error_message=exc.message, member_epoch=-1, heartbeat_interval=0, assignment=None)
    assignment = None
    if result.assignment is not None:
        assignment = ctx.make("Assignment", topic_partitions=[
            ctx.make("TopicPartitions", topic_id=tid, partitions=sorted(parts))
            for tid, parts in sorted(result.assignment.items(), key=lambda item: str(item[0]))
        ])
    return ctx.make("ConsumerGroupHeartbeatResponse", throttle_time=0, error_code=ErrorCode.none,
                    member_id=result.member_id, member_epoch=result.member_epoch,
                    heartbeat_interval=result.heartbeat_interval_ms, assignment=assignment)
