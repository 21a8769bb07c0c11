"""DescribeGroups (15): state, protocol and members of groups.

Member metadata and assignments are only shown for a Stable group (they are in flux otherwise),
and an unknown group is described as "Dead" with no error, as Kafka answers v0-v5.

Each group needs DESCRIBE (GROUP_AUTHORIZATION_FAILED otherwise); asked for (v3+), a described group carries the
operations the principal may do on it.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.apis._common import OPERATIONS_NOT_REQUESTED
from bus.broker.context import RequestContext
from bus.coordinator.group.classic.group import ClassicGroup, GroupState
from bus.security.acls import AclOperation, ResourceType

API_KEY = 15
MIN_VERSION = 0
MAX_VERSION = 5


def _members(ctx: RequestContext, group: ClassicGroup) -> list[Any]:
    stable = group.is_(GroupState.STABLE) and group.protocol_name is not None
    return [
        ctx.make("DescribedGroupMember", member_id=m.member_id, group_instance_id=m.group_instance_id,
                 client_id=m.client_id, client_host=m.client_host,
                 member_metadata=m.metadata(group.protocol_name) if stable else b"",  # type: ignore[arg-type]
                 member_assignment=m.assignment if stable else b"")
        for m in group.members.values()
    ]


def handle(ctx: RequestContext, request: Any) -> Any:
    with_operations = getattr(request, "include_authorized_operations", False)
    described = []
    for group_id in request.groups:
        if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            described.append(ctx.make("DescribedGroup", error_code=ErrorCode.group_authorization_failed,
                                      group_id=group_id, group_state="", protocol_type="", protocol_data="",
                                      members=()))
            continue
        error, group = ctx.groups.describe_group(group_id)
        operations = (ctx.authorized_operations(ResourceType.GROUP, group_id)
                      if with_operations and error == ErrorCode.none else OPERATIONS_NOT_REQUESTED)
        if group is None:
            state = "" if error.value else GroupState.DEAD.value
            described.append(ctx.make("DescribedGroup", error_code=error, group_id=group_id, group_state=state,
                                      protocol_type="", protocol_data="", members=(),
                                      authorized_operations=operations))
            continue
        described.append(ctx.make(
            "DescribedGroup",
            error_code=error,
            group_id=group_id,
            group_state=group.state.value,
            protocol_type=group.protocol_type or "",
            protocol_data=(group.protocol_name or "") if group.is_(GroupState.STABLE) else "",
            members=_members(ctx, group),
            authorized_operations=operations,
        ))
    return ctx.make("DescribeGroupsResponse", throttle_time=0, groups=described)
