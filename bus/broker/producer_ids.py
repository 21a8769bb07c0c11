"""Producer ids for InitProducerId, handed out from blocks the controller commits to the metadata log.

On the active controller (or a node without a quorum) a block comes from the local controller. Any other node of
a quorum asks the active controller for one (AllocateProducerIds, as Kafka's RPCProducerIdManager does) in the
background; until it arrives, InitProducerId answers COORDINATOR_LOAD_IN_PROGRESS, which clients retry.

A block the active controller of a quorum took for itself is dropped when it stops being active: its record may
not have committed, and the next active controller may hand the same ids out again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterator

from kio.schema.errors import ErrorCode

from bus.controller.controller import ControllerError, QuorumController

log = logging.getLogger(__name__)

BLOCK_SIZE = 1000


class ProducerIdManager:
    def __init__(self, controller: QuorumController, block_size: int = BLOCK_SIZE,
                 remote: Callable[[], Awaitable[range]] | None = None) -> None:
        self.controller = controller
        self.block_size = block_size
        self.remote = remote  # a block from the active controller, on a node of a quorum
        self._block: Iterator[int] = iter(())
        self._fetching: asyncio.Task[None] | None = None
        self._block_is_local = False  # taken from the local controller while it was active (with a quorum)

    def next_id(self) -> int:
        if self._block_is_local and not self.controller.active:
            self._block, self._block_is_local = iter(()), False
        for producer_id in self._block:
            return producer_id
        if self.remote is None or self.controller.active:
            self._block = iter(self.controller.allocate_producer_ids(self.block_size))
            self._block_is_local = self.remote is not None
            return next(self._block)
        if self._fetching is None or self._fetching.done():
            self._fetching = asyncio.create_task(self._fetch(self.remote))
        raise ControllerError(ErrorCode.coordinator_load_in_progress,
                              "Waiting for a block of producer ids from the active controller")

    async def _fetch(self, remote: Callable[[], Awaitable[range]]) -> None:
        try:
            block = await remote()
            self._block, self._block_is_local = iter(block), False
        except Exception as exc:  # the next InitProducerId asks again
            log.info("no producer id block from the active controller: %s", exc)
