"""InitProducerId (22): a producer id and epoch for idempotent and transactional producers."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.apis._txn import answer
from bus.broker.context import RequestContext

API_KEY = 22
MIN_VERSION = 0
MAX_VERSION = 5


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

    return answer(call, build)
