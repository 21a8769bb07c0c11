"""BrokerRegistration (62): a broker tells the active controller where it serves clients.

Committed as a broker record (Kafka's RegisterBrokerRecord) before the answer leaves, so every node's Metadata
lists the broker and topics may be placed on it. A request from another cluster gets INCONSISTENT_CLUSTER_ID; one
from a new process of a broker whose previous one's session still lives, DUPLICATE_BROKER_REGISTRATION.
Heartbeats, broker epochs and fencing are a later step: the answer's broker epoch is the log's append count. Only
brokers send it: it needs CLUSTER_ACTION on the cluster (CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.context import RequestContext
from bus.controller.controller import ControllerError
from bus.security.acls import AclOperation

API_KEY = 62
MIN_VERSION = 0
MAX_VERSION = 1


def handle(ctx: RequestContext, request: Any) -> Any:
    if not ctx.authorize_cluster(AclOperation.CLUSTER_ACTION):
        return ctx.error_response(request, ErrorCode.cluster_authorization_failed)
    if request.cluster_id != ctx.metadata.cluster_id:
        return ctx.make("BrokerRegistrationResponse", throttle_time=0, error_code=ErrorCode.inconsistent_cluster_id,
                        broker_epoch=-1)
    endpoints = [(listener.name, listener.host, int(listener.port)) for listener in request.listeners]
    try:
        ctx.controller.register_broker(request.broker_id, endpoints, request.rack, str(request.incarnation_id))
    except ControllerError as exc:
        return ctx.make("BrokerRegistrationResponse", throttle_time=0, error_code=exc.code, broker_epoch=-1)
    return ctx.make("BrokerRegistrationResponse", throttle_time=0, error_code=ErrorCode.none,
                    broker_epoch=ctx.controller.log.written)
