"""ListTransactions (66): transactional ids with their producer and state, filtered (KIP-664).

Only the ids the principal may DESCRIBE are listed (Kafka narrows the listing, never refuses it).
"""

from __future__ import annotations

import time
from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.context import RequestContext
from bus.coordinator.transaction.state import TxnState
from bus.security.acls import AclOperation, ResourceType

API_KEY = 66
MIN_VERSION = 0
MAX_VERSION = 1

_LABELS = {state.label: state for state in TxnState}


def handle(ctx: RequestContext, request: Any) -> Any:
    states = set(request.state_filters)
    unknown = [s for s in states if s not in _LABELS]
    producers = set(request.producer_id_filters)
    min_age = getattr(request, "duration_filter", -1)
    now = int(time.time() * 1000)
    matching = [
        md for md in sorted(ctx.transactions.txns.values(), key=lambda m: m.transactional_id)
        if (not states or md.state.label in states)
        and (not producers or md.producer_id in producers)
        and (min_age is None or min_age < 0 or (md.start_ms >= 0 and now - md.start_ms >= min_age))
    ]
    describable = ctx.authorized(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID,
                                 (md.transactional_id for md in matching))
    listed = [ctx.make("TransactionState", transactional_id=md.transactional_id, producer_id=md.producer_id,
                       transaction_state=md.state.label)
              for md in matching if md.transactional_id in describable]
    return ctx.make("ListTransactionsResponse", throttle_time=0, error_code=ErrorCode.none,
                    unknown_state_filters=unknown, transaction_states=listed)
