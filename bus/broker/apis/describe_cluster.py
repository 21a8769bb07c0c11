"""DescribeCluster (60): the cluster id, the controller and the brokers, as admin clients ask for it.

Only brokers are described here (endpoint type 1): the same ones Metadata lists (`live_brokers`). Kafka's
brokers refuse the controller endpoint type (2): clients ask controllers for it on the controller listener,
which does not serve clients.

Kafka refuses no one DescribeCluster; asked for, `cluster_authorized_operations` says what the principal may do on
the cluster (0 without DESCRIBE on it).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.apis._common import cluster_authorized_operations, controller_id, live_brokers
from bus.broker.context import RequestContext

API_KEY = 60
MIN_VERSION = 0
MAX_VERSION = 1

ENDPOINT_BROKERS = 1


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
    operations = cluster_authorized_operations(ctx, request.include_cluster_authorized_operations)
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
