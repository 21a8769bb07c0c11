"""JoinGroup (11): join (or rejoin) a classic group; the answer waits for the rebalance to complete.

The leader's answer lists every member with its protocol metadata, passed through unchanged, so
client-side assignors (range, roundrobin, sticky, cooperative-sticky) work as they do on Kafka.
v4+ dynamic members first get MEMBER_ID_REQUIRED with an id to rejoin with (KIP-394); v5+ carry
`group.instance.id` (static membership, KIP-345); v9 adds `skip_assignment` for static leaders.
Needs READ on the group (GROUP_AUTHORIZATION_FAILED), as every member request does.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.apis._groups import client_host, millis, respond_with
from bus.broker.context import RequestContext
from bus.coordinator.group.classic.member import JoinResult
from bus.coordinator.group.classic.protocol import JoinRequest, pending_answer
from bus.security.acls import AclOperation, ResourceType

API_KEY = 11
MIN_VERSION = 0
MAX_VERSION = 9

MEMBER_ID_REQUIRED_VERSION = 4
SKIP_ASSIGNMENT_VERSION = 9
NULLABLE_PROTOCOL_NAME_VERSION = 7


def handle(ctx: RequestContext, request: Any) -> Any:
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return ctx.error_response(request, ErrorCode.group_authorization_failed)
    version = ctx.api_version
    instance_id = getattr(request, "group_instance_id", None)
    session_timeout = millis(request.session_timeout)
    rebalance_timeout = getattr(request, "rebalance_timeout", None)  # v0 has one timeout for both
    join = JoinRequest(
        group_id=request.group_id,
        member_id=request.member_id,
        group_instance_id=instance_id,
        client_id=ctx.client_id or "",
        client_host=client_host(ctx),
        session_timeout_ms=session_timeout,
        rebalance_timeout_ms=session_timeout if rebalance_timeout is None else millis(rebalance_timeout),
        protocol_type=request.protocol_type,
        protocols=tuple((p.name, p.metadata) for p in request.protocols),
        require_known_member_id=version >= MEMBER_ID_REQUIRED_VERSION and instance_id is None,
        supports_skip_assignment=version >= SKIP_ASSIGNMENT_VERSION,
        reason=getattr(request, "reason", None),
    )
    future: asyncio.Future[JoinResult]
    future, respond = pending_answer()
    ctx.groups.join_group(join, respond)
    return respond_with(future, lambda result: _response(ctx, result))


def _response(ctx: RequestContext, result: JoinResult) -> Any:
    protocol_name = result.protocol_name
    if ctx.api_version < NULLABLE_PROTOCOL_NAME_VERSION and protocol_name is None:
        protocol_name = ""
    members = [ctx.make("JoinGroupResponseMember", member_id=member_id, group_instance_id=instance_id,
                        metadata=metadata) for member_id, instance_id, metadata in result.members]
    return ctx.make(
        "JoinGroupResponse",
        throttle_time=0,
        error_code=result.error,
        generation_id=result.generation_id,
        protocol_type=result.protocol_type,
        protocol_name=protocol_name,
        leader=result.leader_id,
        skip_assignment=result.skip_assignment,
        member_id=result.member_id,
        members=members,
    )
