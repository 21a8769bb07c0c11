"""Heartbeat (12): keeps a member's session alive; REBALANCE_IN_PROGRESS tells it to rejoin.

Needs READ on the group (GROUP_AUTHORIZATION_FAILED), as every member request does.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.context import RequestContext
from bus.security.acls import AclOperation, ResourceType

API_KEY = 12
MIN_VERSION = 0
MAX_VERSION = 4


def handle(ctx: RequestContext, request: Any) -> Any:
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return ctx.error_response(request, ErrorCode.group_authorization_failed)
    error = ctx.groups.heartbeat(request.group_id, request.member_id,
                                        getattr(request, "group_instance_id", None), request.generation_id)
    return ctx.make("HeartbeatResponse", throttle_time=0, error_code=error)
