"""ListGroups (16): the groups this broker coordinates (classic and KIP-848), by state (v4+) and type (v5+).

With DESCRIBE on the cluster every group is listed, else only those the principal may DESCRIBE (Kafka's answer: a
listing is narrowed, never refused).
"""

from __future__ import annotations

from typing import Any

from bus.broker.context import RequestContext
from bus.security.acls import AclOperation, ResourceType

API_KEY = 16
MIN_VERSION = 0
MAX_VERSION = 5


def handle(ctx: RequestContext, request: Any) -> Any:
    states = set(getattr(request, "states_filter", ()) or ())
    types = set(getattr(request, "types_filter", ()) or ())
    error, groups = ctx.groups.list_groups(states, types)
    if not ctx.authorize_cluster(AclOperation.DESCRIBE, log_if_denied=False):
        describable = ctx.authorized(AclOperation.DESCRIBE, ResourceType.GROUP, (g.group_id for g in groups),
                                     log_if_denied=False)
        groups = [g for g in groups if g.group_id in describable]
    listed = [ctx.make("ListedGroup", group_id=g.group_id, protocol_type=g.protocol_type, group_state=g.state,
                       group_type=g.group_type) for g in groups]
    return ctx.make("ListGroupsResponse", throttle_time=0, error_code=error, groups=listed)
