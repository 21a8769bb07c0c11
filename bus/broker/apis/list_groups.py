"""ListGroups (16): the groups this broker coordinates, filtered by state (v4+) and type (v5+)."""

from __future__ import annotations

from typing import Any

from bus.broker.context import RequestContext
from bus.coordinator.group.coordinator import GROUP_TYPE_CLASSIC

API_KEY = 16
MIN_VERSION = 0
MAX_VERSION = 5


def handle(ctx: RequestContext, request: Any) -> Any:
    states = set(getattr(request, "states_filter", ()) or ())
    types = set(getattr(request, "types_filter", ()) or ())
    error, groups = ctx.broker.groups.list_groups(states, types)
    listed = [ctx.make("ListedGroup", group_id=g.group_id, protocol_type=g.protocol_type or "",
                       group_state=g.state.value, group_type=GROUP_TYPE_CLASSIC)
              for g in sorted(groups, key=lambda g: g.group_id)]
    return ctx.make("ListGroupsResponse", throttle_time=0, error_code=error, groups=listed)
