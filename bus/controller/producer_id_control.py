"""Producer id blocks (Kafka's ProducerIdControlManager): the next free producer id is metadata, committed first.

A broker asks the active controller for a block of ids (AllocateProducerIds) and hands them out to idempotent and
transactional producers; the block is committed before it is used, so no id is handed out twice across crashes.
"""

from __future__ import annotations

from bus.controller.control_context import ControlContext


class ProducerIdControlManager:
    def __init__(self, context: ControlContext) -> None:
        self._context = context

    def allocate_producer_ids(self, count: int = 1000) -> range:
        """Hand a block of producer ids to a broker (Kafka's AllocateProducerIds): committed first, so an id
        is never reused after a crash (with a quorum the caller awaits the log's `sync` before using it)."""
        self._context.check_active()
        start = self._context.working.next_producer_id
        self._context.commit([{"type": "producer_ids", "next": start + count}])
        return range(start, start + count)
