"""Producer ids for InitProducerId, handed out from blocks the controller commits to the metadata log."""

from __future__ import annotations

from collections.abc import Iterator

from bus.controller.controller import QuorumController


class ProducerIdManager:
    def __init__(self, controller: QuorumController, block_size: int = 1000) -> None:
        self.controller = controller
        self.block_size = block_size
        self._block: Iterator[int] = iter(())

    def next_id(self) -> int:
        for producer_id in self._block:
            return producer_id
        self._block = iter(self.controller.allocate_producer_ids(self.block_size))
        return next(self._block)
