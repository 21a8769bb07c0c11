"""DescribeQuorum (55) on a client listener, as `kafka-metadata-quorum describe` sends it to any broker.

Kafka's brokers forward it to the active controller; here a node with the controller role asks its raft
driver, which answers itself when it leads and otherwise forwards to the leader's controller listener. A
node without a quorum (no `controller.quorum.voters`) answers NOT_CONTROLLER. Needs DESCRIBE on the cluster
(CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.context import RequestContext
from bus.broker.controller_apis._raft import error
from bus.raft import wire
from bus.raft.driver import RaftDriver
from bus.security.acls import AclOperation

API_KEY = wire.DESCRIBE_QUORUM
MIN_VERSION = MAX_VERSION = wire.VERSIONS[wire.DESCRIBE_QUORUM]


async def _describe(raft: RaftDriver) -> Any:
    return wire.to_kio(await raft.describe())


def handle(ctx: RequestContext, request: Any) -> Any:
    if not ctx.authorize_cluster(AclOperation.DESCRIBE):
        return error(ctx, request, ErrorCode.cluster_authorization_failed)
    raft = ctx.services.raft
    if raft is None:
        return error(ctx, request, ErrorCode.not_controller)
    try:
        wire.from_kio(request)
    except wire.WireError:
        return error(ctx, request, ErrorCode.invalid_request)
    return _describe(raft)
