"""SyncGroup (14): the leader hands in the assignment; every member waits for, and receives, its own.

In a Stable group SyncGroup just repeats the member's current assignment (a static member that
rejoined without a rebalance gets its old partitions back this way). Needs READ on the group
(GROUP_AUTHORIZATION_FAILED), as every member request does.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.apis._groups import respond_with
from bus.broker.context import RequestContext
from bus.coordinator.group.classic.member import SyncResult
from bus.coordinator.group.classic.protocol import pending_answer
from bus.security.acls import AclOperation, ResourceType

API_KEY = 14
MIN_VERSION = 0
MAX_VERSION = 5


def handle(ctx: RequestContext, request: Any) -> Any:
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return ctx.error_response(request, ErrorCode.group_authorization_failed)
    future: asyncio.Future[SyncResult]
    future, respond = pending_answer()
    ctx.groups.sync_group(
        request.group_id,
        request.generation_id,
        request.member_id,
        getattr(request, "group_instance_id", None),
        getattr(request, "protocol_type", None),
        getattr(request, "protocol_name", None),
        {a.member_id: a.assignment for a in request.assignments},
        respond,
    )
    return respond_with(future, lambda result: _response(ctx, result))


def _response(ctx: RequestContext, result: SyncResult) -> Any:
    return ctx.make("SyncGroupResponse", throttle_time=0, error_code=result.error,
                    protocol_type=result.protocol_type, protocol_name=result.protocol_name,
                    assignment=result.assignment)
