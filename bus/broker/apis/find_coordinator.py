"""FindCoordinator (10): which broker coordinates a group (key type 0) or a transactional id (1).

v0-v3 ask about one key; v4+ batch them in `coordinator_keys` and answer one entry each. A group's
coordinator is the leader of its `__consumer_offsets` partition; on this single-node cluster that is
this broker once the partition is loaded, so the answer is our endpoint on the listener asked on.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.apis._common import advertised_endpoint
from bus.broker.context import RequestContext

API_KEY = 10
MIN_VERSION = 0
MAX_VERSION = 6

KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1
BATCHED_VERSION = 4


def _lookup(ctx: RequestContext, key_type: int, key: str) -> tuple[ErrorCode, str | None]:
    if key_type == KEY_TYPE_GROUP:
        error = ctx.groups.coordinator_error(key)
        if error is None:
            return ErrorCode.none, None
        return error, "The coordinator is not available."
    if key_type == KEY_TYPE_TRANSACTION:
        # A single node hosts every __transaction_state partition: it is every id's coordinator.
        return ErrorCode.none, None
    return ErrorCode.invalid_request, f"Invalid coordinator type: {key_type}"


def handle(ctx: RequestContext, request: Any) -> Any:
    endpoint = advertised_endpoint(ctx)
    node_id = ctx.node_id
    key_type = getattr(request, "key_type", KEY_TYPE_GROUP)
    if ctx.api_version < BATCHED_VERSION:
        code, message = _lookup(ctx, key_type, request.key)
        found = code == ErrorCode.none
        return ctx.make("FindCoordinatorResponse", throttle_time=0, error_code=code,
                        error_message=None if found else message, node_id=node_id if found else -1,
                        host=endpoint.host if found else "", port=endpoint.port if found else -1)
    coordinators = []
    for key in request.coordinator_keys:
        code, message = _lookup(ctx, key_type, key)
        found = code == ErrorCode.none
        coordinators.append(ctx.make("Coordinator", key=key, node_id=node_id if found else -1,
                                     host=endpoint.host if found else "", port=endpoint.port if found else -1,
                                     error_code=code, error_message=None if found else message))
    return ctx.make("FindCoordinatorResponse", throttle_time=0, coordinators=coordinators)
