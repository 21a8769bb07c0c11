"""EndTxn (26): commit or abort; answered once the decision is in `__transaction_state` (replicated, where
the partition has followers); the markers are written before (a single replica) or after it.

Needs WRITE on the transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.apis._txn import answer, fenced_code
from bus.broker.context import RequestContext
from bus.security.acls import AclOperation, ResourceType

API_KEY = 26
MIN_VERSION = 0
MAX_VERSION = 4


def handle(ctx: RequestContext, request: Any) -> Any:
    if not ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        return ctx.make("EndTxnResponse", throttle_time=0, error_code=ErrorCode.transactional_id_authorization_failed)
    return answer(
        lambda: ctx.transactions.end_txn(request.transactional_id, request.producer_id, request.producer_epoch,
                                         request.committed, fenced_code(ctx.api_version, 2)),
        lambda _result, code: ctx.make("EndTxnResponse", throttle_time=0, error_code=code))
