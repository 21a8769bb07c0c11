"""What every KRaft RPC handler does: check the cluster id, map kio to the core's message, await the node.

Kafka answers a request from another cluster with INCONSISTENT_CLUSTER_ID and one it cannot read (another
topic than `__cluster_metadata`, more than one partition) with INVALID_REQUEST, both before the raft
client sees it; so do these handlers. Before that, as Kafka's ControllerApis: the sender needs CLUSTER_ACTION on the
cluster (it is a controller or a broker), DESCRIBE for DescribeQuorum (an operator's tool asks it);
CLUSTER_AUTHORIZATION_FAILED otherwise.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.context import RequestContext
from bus.network.errors import CloseConnection
from bus.raft import wire
from bus.raft.driver import RaftDriver, RaftStoppedError
from bus.raft.messages import Request
from bus.security.acls import AclOperation


def error(ctx: RequestContext, request: Any, code: ErrorCode) -> Any:
    return ctx.error_response(request, code)


def driver(ctx: RequestContext) -> RaftDriver:
    raft = ctx.services.raft
    if raft is None:  # the controller table is only served when the node runs a quorum
        raise RuntimeError("a KRaft request reached a node without a raft driver")
    return raft


async def answer(ctx: RequestContext, request: Any) -> Any:
    """The kio response of the local raft node to a kio request on the controller listener."""
    operation = AclOperation.DESCRIBE if ctx.api_key == wire.DESCRIBE_QUORUM else AclOperation.CLUSTER_ACTION
    if not ctx.authorize_cluster(operation):
        return error(ctx, request, ErrorCode.cluster_authorization_failed)
    raft = driver(ctx)
    cluster_id = getattr(request, "cluster_id", None)
    if cluster_id is not None and cluster_id != ctx.metadata.cluster_id:
        return error(ctx, request, ErrorCode.inconsistent_cluster_id)
    try:
        body = wire.from_kio(request)
    except wire.WireError:
        return error(ctx, request, ErrorCode.invalid_request)
    assert isinstance(body, Request)  # decoded from a request frame
    try:
        response = await raft.handle_request(body)
    except RaftStoppedError:
        # A stopping node answers no more KRaft requests: it closes the connection, as Kafka's does once its raft
        # client has shut down (the peer retries elsewhere); not an UNKNOWN_SERVER_ERROR logged as a failure.
        raise CloseConnection("the raft node is stopping") from None
    except TimeoutError:
        # No reply within the request timeout: this process was paused (SIGSTOP, a stalled VM) past it, and on
        # waking the timeout fired before the node's tick answered. The peer's request is long expired on its side
        # too; close the connection so that it retries, as for a stopping node (a chaos run logged these as handler
        # failures with a traceback).
        raise CloseConnection(f"no raft reply to {type(body).__name__} within the request timeout") from None
    return wire.to_kio(response)
