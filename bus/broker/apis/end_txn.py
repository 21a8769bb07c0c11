"""EndTxn (26): commit or abort; the coordinator writes the markers before answering."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.apis._txn import fenced_code
from bus.broker.context import RequestContext
from bus.coordinator.transaction.coordinator import TxnError

API_KEY = 26
MIN_VERSION = 0
MAX_VERSION = 4


def handle(ctx: RequestContext, request: Any) -> Any:
    code = ErrorCode.none
    try:
        ctx.transactions.end_txn(request.transactional_id, request.producer_id, request.producer_epoch,
                                        request.committed, fenced_code(ctx.api_version, 2))
    except TxnError as exc:
        code = exc.code
    return ctx.make("EndTxnResponse", throttle_time=0, error_code=code)
