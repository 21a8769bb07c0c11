"""DescribeCluster (60): the cluster id, the controller and the brokers, as admin clients ask for it.

Only brokers are described here (endpoint type 1): the same ones Metadata lists (`live_brokers`). Kafka's
brokers refuse the controller endpoint type (2): clients ask controllers for it on the controller listener,
which does not serve clients.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.apis._common import controller_id, live_brokers
from bus.broker.context import RequestContext

API_KEY = 60
MIN_VERSION = 0
MAX_VERSION = 1

ENDPOINT_BROKERS = 1

# AclOperation codes Kafka supports on the CLUSTER resource. There is no authorizer, so every
# client may do all of them, which is what Kafka reports without one.
_CLUSTER_OPERATIONS = (
    5,  # CREATE
    7,  # ALTER
    8,  # DESCRIBE
    9,  # CLUSTER_ACTION
    10,  # DESCRIBE_CONFIGS
    11,  # ALTER_CONFIGS
    12,  # IDEMPOTENT_WRITE
)
ALL_CLUSTER_OPERATIONS = sum(1 << op for op in _CLUSTER_OPERATIONS)
OPERATIONS_NOT_REQUESTED = -(2**31)


def handle(ctx: RequestContext, request: Any) -> Any:
    endpoint_type = getattr(request, "endpoint_type", ENDPOINT_BROKERS)
    if endpoint_type != ENDPOINT_BROKERS:
        return ctx.make(
            "DescribeClusterResponse",
            throttle_time=0,
            error_code=ErrorCode.unsupported_endpoint_type,
            error_message=f"The broker does not support the endpoint type {endpoint_type}",
            endpoint_type=endpoint_type,
            cluster_id=ctx.metadata.cluster_id,
            controller_id=-1,
            brokers=(),
        )
    operations = ALL_CLUSTER_OPERATIONS if request.include_cluster_authorized_operations else OPERATIONS_NOT_REQUESTED
    return ctx.make(
        "DescribeClusterResponse",
        throttle_time=0,
        error_code=ErrorCode.none,
        error_message=None,
        endpoint_type=ENDPOINT_BROKERS,
        cluster_id=ctx.metadata.cluster_id,
        controller_id=controller_id(ctx),
        brokers=[ctx.make("DescribeClusterBroker", broker_id=b.node_id, host=b.host, port=b.port, rack=b.rack)
                 for b in live_brokers(ctx)],
        cluster_authorized_operations=operations,
    )
