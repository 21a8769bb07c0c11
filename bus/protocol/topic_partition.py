"""The one `TopicPartition` of the code base (Kafka's org.apache.kafka.common.TopicPartition).

A named tuple, so it is also the plain `(topic, partition)` pair that offsets maps, the log manager
and the coordinators key on: `TopicPartition("t", 0) == ("t", 0)`, with the same hash.
"""

from __future__ import annotations

from typing import NamedTuple


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"  # as Kafka's TopicPartition.toString
