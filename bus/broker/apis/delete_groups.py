"""DeleteGroups (42): remove Empty groups and their committed offsets (tombstones in `__consumer_offsets`).

Each group needs DELETE (GROUP_AUTHORIZATION_FAILED, and it is left alone).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.context import RequestContext
from bus.security.acls import AclOperation, ResourceType

API_KEY = 42
MIN_VERSION = 0
MAX_VERSION = 2


def handle(ctx: RequestContext, request: Any) -> Any:
    named = list(dict.fromkeys(request.groups_names))
    deletable = ctx.authorized(AclOperation.DELETE, ResourceType.GROUP, named)
    results = ctx.groups.delete_groups([group_id for group_id in named if group_id in deletable])
    codes = {group_id: results[group_id] if group_id in deletable else ErrorCode.group_authorization_failed
             for group_id in named}
    return ctx.make("DeleteGroupsResponse", throttle_time=0, results=[
        ctx.make("DeletableGroupResult", group_id=group_id, error_code=code) for group_id, code in codes.items()
    ])
