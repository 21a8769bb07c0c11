"""Rebuilding a stateful stage's state after a restart or a rebalance by re-reading its input.

The cloned-plate and statistics stages hold state in memory (a plate's recent sightings, open windows)
that covers records *before* their committed offsets. Kafka Streams keeps such state in a changelog
topic; here the input itself is the changelog: on assignment each partition starts earlier, at
``offsets_for_times(timestamp of the last committed record - back)``, and the records between that start
and the committed offset only rebuild state (``replaying``): their outputs went out before the crash
and were acknowledged, or the offset would not have been committed.

This relies on the eager rebalance protocol (every partition revoked, then the new assignment): the
stage drops all of its state on revoke and every partition rewinds, so nothing is half rebuilt. The
stages using it pin ``partition.assignment.strategy`` to ``range`` for that reason.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from confluent_kafka import Consumer, Message, TopicPartition

from .settings import Settings

log = logging.getLogger(__name__)
EAGER = {"partition.assignment.strategy": "range"}
"""Consumer setting of a stage that rewinds (see the module docstring)."""


class Rewind:
    """Per assigned partition: where to start reading, and up to which offset records only rebuild."""

    def __init__(self, settings: Settings, client: str, back_ms: Callable[[], int]) -> None:
        self.back_ms = back_ms
        self.consumer: Consumer | None = None
        self.replay_until: dict[tuple[str, int], int] = {}
        self._peek = Consumer({**settings.bus, "group.id": f"surveillance-{client}-peek",
                               "client.id": f"{client}-peek@{settings.instance}", "enable.auto.commit": False,
                               "log_level": 3})

    def attach(self, consumer: Consumer) -> Consumer:
        self.consumer = consumer
        return consumer

    def _timestamp_at(self, topic: str, partition: int, offset: int) -> int | None:
        """The record timestamp at ``offset`` (or the next record still there), None if none answers."""
        self._peek.assign([TopicPartition(topic, partition, offset)])
        try:
            for message in self._peek.consume(1, 5.0):
                if message.error() is None:
                    return message.timestamp()[1]
            return None
        finally:
            self._peek.unassign()

    def on_assign(self, partitions: list[TopicPartition]) -> None:
        """Move each partition's start back far enough to rebuild the state its committed records built."""
        assert self.consumer is not None, "attach the stage's consumer first"
        back = self.back_ms()
        self.replay_until.clear()
        committed = self.consumer.committed(partitions, timeout=30)
        for tp in committed:
            if tp.offset <= 0:
                continue  # nothing consumed yet: auto.offset.reset decides, nothing to rebuild
            stamp = self._timestamp_at(tp.topic, tp.partition, tp.offset - 1)
            start = tp.offset
            if stamp is not None and stamp > 0:
                [found] = self.consumer.offsets_for_times([TopicPartition(tp.topic, tp.partition, stamp - back)],
                                                          timeout=30)
                if 0 <= found.offset < start:
                    start = found.offset
            if start < tp.offset:
                self.replay_until[(tp.topic, tp.partition)] = tp.offset
            log.info("%s[%d]: rebuilding from offset %d, outputs from %d", tp.topic, tp.partition, start, tp.offset)
            tp.offset = start
        self.consumer.assign(committed)

    def replaying(self, message: Message) -> bool:
        """Whether this record only rebuilds state; a partition leaves replay at its committed offset."""
        key, offset = (message.topic() or "", message.partition() or 0), message.offset()
        until = self.replay_until.get(key)
        if until is None or offset is None:
            return False
        if offset + 1 >= until:
            del self.replay_until[key]
        return offset < until

    @property
    def rebuilding(self) -> bool:
        """Some partition is still below its committed offset (state not yet whole)."""
        return bool(self.replay_until)

    def close(self) -> None:
        self._peek.close()
