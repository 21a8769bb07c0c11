"""InitProducerId (22): a producer id and epoch for idempotent and transactional producers.

Authorization (Kafka's handleInitProducerIdRequest): a transactional producer needs WRITE on its transactional id
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED); an idempotent one IDEMPOTENT_WRITE on the cluster or WRITE on some topic
(CLUSTER_AUTHORIZATION_FAILED), since its id is only good for writing.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.apis._txn import answer
from bus.broker.context import RequestContext
from bus.security.acls import AclOperation, ResourceType

API_KEY = 22
MIN_VERSION = 0
MAX_VERSION = 5


def _refusal(ctx: RequestContext, request: Any) -> ErrorCode | None:
    if request.transactional_id is not None:
        if ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
            return None
        return ErrorCode.transactional_id_authorization_failed
    if (ctx.authorize_cluster(AclOperation.IDEMPOTENT_WRITE, log_if_denied=False)
            or ctx.authorize_by_resource_type(AclOperation.WRITE, ResourceType.TOPIC)):
        return None
    return ErrorCode.cluster_authorization_failed


def handle(ctx: RequestContext, request: Any) -> Any:
    def call() -> Any:
        if request.transactional_id is None:
            return ctx.producer_ids.next_id(), 0  # ControllerError: no producer id block on this node yet
        return ctx.transactions.init_producer_id(
            request.transactional_id,
            int(request.transaction_timeout.total_seconds() * 1000),
            getattr(request, "producer_id", -1),
            getattr(request, "producer_epoch", -1),
        )

    def build(result: tuple[int, int] | None, code: ErrorCode) -> Any:
        if result is None:
            if code is ErrorCode.producer_fenced and ctx.api_version < 4:
                code = ErrorCode.invalid_producer_epoch
            return ctx.make("InitProducerIdResponse", throttle_time=0, error_code=code, producer_id=-1,
                            producer_epoch=-1)
        producer_id, epoch = result
        return ctx.make("InitProducerIdResponse", throttle_time=0, error_code=ErrorCode.none,
                        producer_id=producer_id, producer_epoch=epoch)

    refusal = _refusal(ctx, request)
    if refusal is not None:
        return build(None, refusal)
    return answer(call, build)
