"""DeleteGroups (42): remove Empty groups and their committed offsets (tombstones in `__consumer_offsets`)."""

from __future__ import annotations

from typing import Any

from bus.broker.context import RequestContext

API_KEY = 42
MIN_VERSION = 0
MAX_VERSION = 2


def handle(ctx: RequestContext, request: Any) -> Any:
    results = ctx.groups.delete_groups(list(dict.fromkeys(request.groups_names)))
    return ctx.make("DeleteGroupsResponse", throttle_time=0, results=[
        ctx.make("DeletableGroupResult", group_id=group_id, error_code=code) for group_id, code in results.items()
    ])
