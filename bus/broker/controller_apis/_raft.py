"""What every KRaft RPC handler does: check the cluster id, map kio to the core's message, await the node.

Kafka answers a request from another cluster with INCONSISTENT_CLUSTER_ID and one it cannot read (another
topic than `__cluster_metadata`, more than one partition) with INVALID_REQUEST, both before the raft
client sees it; so do these handlers.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.context import RequestContext
from bus.protocol.error_response import error_response
from bus.protocol.messages import response_class
from bus.raft import wire
from bus.raft.driver import RaftDriver
from bus.raft.messages import Request


def error(ctx: RequestContext, request: Any, code: ErrorCode) -> Any:
    return error_response(ctx.shapes, response_class(ctx.api_key, ctx.api_version), request, code)


def driver(ctx: RequestContext) -> RaftDriver:
    raft = ctx.services.raft
    if raft is None:  # the controller table is only served when the node runs a quorum
        raise RuntimeError("a KRaft request reached a node without a raft driver")
    return raft


async def answer(ctx: RequestContext, request: Any) -> Any:
    """The kio response of the local raft node to a kio request on the controller listener."""
    raft = driver(ctx)
    cluster_id = getattr(request, "cluster_id", None)
    if cluster_id is not None and cluster_id != ctx.metadata.cluster_id:
        return error(ctx, request, ErrorCode.inconsistent_cluster_id)
    try:
        body = wire.from_kio(request)
    except wire.WireError:
        return error(ctx, request, ErrorCode.invalid_request)
    assert isinstance(body, Request)  # decoded from a request frame
    return wire.to_kio(await raft.handle_request(body))
