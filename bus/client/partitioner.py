"""Which partition a record goes to: explicit, else Java's murmur2 of the key, else sticky (KIP-480).

Keyed records must land where the Java client puts them, bit for bit: other services (and Kafka
Streams joins) rely on `toPositive(murmur2(key)) % numPartitions` over *all* partitions of the topic.
Records without a key stick to one partition until a batch for it fills, then move on to another
available partition, so null-key traffic forms full batches instead of one tiny batch per partition.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Sequence
from typing import Protocol

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def murmur2(data: bytes | bytearray | memoryview) -> int:
    """Kafka's `Utils.murmur2`: 32-bit MurmurHash2 with seed 0x9747b28c, as a signed int."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    end = length & ~3
    for i in range(0, end, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    left = length & 3
    if left == 3:
        h ^= data[end + 2] << 16
    if left >= 2:
        h ^= data[end + 1] << 8
    if left >= 1:
        h ^= data[end]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(number: int) -> int:
    """Kafka's `Utils.toPositive`: clears the sign bit (not abs(), which differs for negatives)."""
    return number & 0x7FFFFFFF


_CACHE_LIMIT = 65536
_cache: dict[bytes, int] = {}


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """The partition Java's default partitioner picks for a key; repeated keys hit a small cache."""
    hashed = _cache.get(key)
    if hashed is None:
        if len(_cache) >= _CACHE_LIMIT:
            _cache.clear()
        hashed = _cache[key] = to_positive(murmur2(key))
    return hashed % num_partitions


class Partitioner(Protocol):
    """A custom `partitioner.class`: Java's Partitioner interface in Python."""

    def partition(self, topic: str, key: bytes | None, value: bytes | None, partitions: Sequence[int],
                  available: Sequence[int]) -> int: ...


class StickyPartitioner:
    """The built-in partitioner's null-key half: one sticky partition per topic until its batch is full."""

    def __init__(self) -> None:
        self._sticky: dict[str, int] = {}
        self._lock = threading.Lock()
        self._random = random.Random()

    def partition(self, topic: str, num_partitions: int, available: Sequence[int]) -> int:
        current = self._sticky.get(topic)
        if current is None or current >= num_partitions:
            return self.next_partition(topic, num_partitions, available, None)
        return current

    def next_partition(self, topic: str, num_partitions: int, available: Sequence[int], previous: int | None) -> int:
        """Choose a new sticky partition, different from `previous` when there is a choice (KIP-480)."""
        with self._lock:
            current = self._sticky.get(topic)
            if current is not None and current != previous and current < num_partitions:
                return current  # another thread already moved on
            choices = [p for p in available if p != previous] or [p for p in range(num_partitions) if p != previous]
            chosen = self._random.choice(choices) if choices else 0
            self._sticky[topic] = chosen
            return chosen
