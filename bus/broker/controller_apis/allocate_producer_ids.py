"""AllocateProducerIds (67): a block of producer ids for a broker's InitProducerId, from the active controller.

The block is committed to the metadata log before the answer leaves (KafkaApis awaits the log's sync and answers
NOT_CONTROLLER if it cannot be committed), so an id is never handed out twice, even across a failover. Only brokers
ask: it needs CLUSTER_ACTION on the cluster (CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.context import RequestContext
from bus.broker.producer_ids import BLOCK_SIZE
from bus.controller.controller import ControllerError
from bus.security.acls import AclOperation

API_KEY = 67
MIN_VERSION = MAX_VERSION = 0


def handle(ctx: RequestContext, request: Any) -> Any:
    if not ctx.authorize_cluster(AclOperation.CLUSTER_ACTION):
        return ctx.error_response(request, ErrorCode.cluster_authorization_failed)
    try:
        block = ctx.controller.allocate_producer_ids(BLOCK_SIZE)
    except ControllerError as exc:
        return ctx.make("AllocateProducerIdsResponse", throttle_time=0, error_code=exc.code, producer_id_start=-1,
                        producer_id_len=0)
    return ctx.make("AllocateProducerIdsResponse", throttle_time=0, error_code=ErrorCode.none,
                    producer_id_start=block.start, producer_id_len=len(block))
