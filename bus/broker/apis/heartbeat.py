"""Heartbeat (12): keeps a member's session alive; REBALANCE_IN_PROGRESS tells it to rejoin."""

from __future__ import annotations

from typing import Any

from bus.broker.context import RequestContext

API_KEY = 12
MIN_VERSION = 0
MAX_VERSION = 4


def handle(ctx: RequestContext, request: Any) -> Any:
    error = ctx.groups.heartbeat(request.group_id, request.member_id,
                                        getattr(request, "group_instance_id", None), request.generation_id)
    return ctx.make("HeartbeatResponse", throttle_time=0, error_code=error)
