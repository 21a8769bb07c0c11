"""LeaveGroup (13): members leave so the group rebalances at once instead of after a session timeout.

v0-v2 name one member; v3+ batch members, each with an optional `group.instance.id` (an admin may
remove a static member by instance id alone, with an empty member id). Old versions carry the
member's error in the top-level error code, as Kafka's LeaveGroupResponse does. Needs READ on the
group (GROUP_AUTHORIZATION_FAILED), as every member request does.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.context import RequestContext
from bus.security.acls import AclOperation, ResourceType

API_KEY = 13
MIN_VERSION = 0
MAX_VERSION = 5

BATCHED_VERSION = 3


def handle(ctx: RequestContext, request: Any) -> Any:
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return ctx.error_response(request, ErrorCode.group_authorization_failed)
    if ctx.api_version < BATCHED_VERSION:
        leaving = [(request.member_id, None)]
    else:
        leaving = [(m.member_id, m.group_instance_id) for m in request.members]
    error, results = ctx.groups.leave_group(request.group_id, leaving)
    if ctx.api_version < BATCHED_VERSION:
        if error == ErrorCode.none and results:
            error = results[0]
        return ctx.make("LeaveGroupResponse", throttle_time=0, error_code=error)
    members = [ctx.make("MemberResponse", member_id=member_id, group_instance_id=instance_id, error_code=code)
               for (member_id, instance_id), code in zip(leaving, results, strict=False)]
    return ctx.make("LeaveGroupResponse", throttle_time=0, error_code=error, members=members)
