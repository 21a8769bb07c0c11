"""DescribeGroups (15): state, protocol and members of groups.

Member metadata and assignments are only shown for a Stable group (they are in flux otherwise),
and an unknown group is described as "Dead" with no error, as Kafka answers v0-v5.
"""

from __future__ import annotations

from typing import Any

from bus.broker.context import RequestContext
from bus.coordinator.group.group import ClassicGroup, GroupState

API_KEY = 15
MIN_VERSION = 0
MAX_VERSION = 5

# Without an authorizer every operation a group ACL can name is allowed:
# READ(3), DELETE(6), DESCRIBE(8), DESCRIBE_CONFIGS(10), ALTER_CONFIGS(11).
ALL_GROUP_OPERATIONS = sum(1 << op for op in (3, 6, 8, 10, 11))
OPERATIONS_NOT_REQUESTED = -(1 << 31)


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
    operations = ALL_GROUP_OPERATIONS if getattr(request, "include_authorized_operations", False) \
        else OPERATIONS_NOT_REQUESTED
    described = []
    for group_id in request.groups:
        error, group = ctx.groups.describe_group(group_id)
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
