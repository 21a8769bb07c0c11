"""Which partition of a coordinator's internal topic owns a key: Kafka's exact formula.

Kafka places a group (on `__consumer_offsets`) and a transactional id (on `__transaction_state`) at
`Utils.abs(key.hashCode) % partitions`, with Java's String.hashCode; clients, tools and data written
by Kafka only line up with ours if the result is bit-for-bit the same.
"""

from __future__ import annotations


def java_string_hash(text: str) -> int:
    """Java's `String.hashCode()` over UTF-16 code units, in 32-bit two's complement."""
    units = text.encode("utf-16-be")
    value = 0
    for i in range(0, len(units), 2):
        value = (31 * value + ((units[i] << 8) | units[i + 1])) & 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


def kafka_abs(value: int) -> int:
    """Kafka's `Utils.abs`: Integer.MIN_VALUE maps to 0 instead of staying negative."""
    return 0 if value == -(1 << 31) else abs(value)


def partition_for(key: str, num_partitions: int) -> int:
    return kafka_abs(java_string_hash(key)) % num_partitions
