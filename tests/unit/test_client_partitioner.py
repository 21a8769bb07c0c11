"""The partitioner must place keys exactly where the Java client does (Kafka's own test vectors)."""

from __future__ import annotations

import collections

import pytest

from bus.client.partitioner import StickyPartitioner, murmur2, partition_for_key, to_positive

# org.apache.kafka.common.utils.UtilsTest.testMurmur2, plus the empty key.
JAVA_MURMUR2 = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
    (b"", 275646681),
]


@pytest.mark.parametrize(("data", "expected"), JAVA_MURMUR2)
def test_murmur2_matches_java_utils(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected


def test_to_positive_clears_the_sign_bit_like_java() -> None:
    # Utils.toPositive is `number & 0x7fffffff`, which differs from abs() for negatives.
    assert to_positive(-790332482) == 1357151166
    assert to_positive(-(2**31)) == 0
    assert to_positive(5) == 5


def test_keyed_partition_is_to_positive_murmur2_mod_n() -> None:
    assert partition_for_key(b"foobar", 10) == 6  # 1357151166 % 10
    assert partition_for_key(b"foobar", 50) == 16
    for data, hashed in JAVA_MURMUR2:
        for n in (1, 3, 12, 100):
            assert partition_for_key(data, n) == (hashed & 0x7FFFFFFF) % n


def test_keyed_partition_is_stable_across_calls_and_cache_clears() -> None:
    first = [partition_for_key(f"key-{i}".encode(), 7) for i in range(1000)]
    assert first == [partition_for_key(f"key-{i}".encode(), 7) for i in range(1000)]


def test_sticky_partitioner_sticks_until_a_new_batch_then_moves() -> None:
    sticky = StickyPartitioner()
    available = [0, 1, 2, 3]
    chosen = sticky.partition("t", 4, available)
    assert all(sticky.partition("t", 4, available) == chosen for _ in range(100))
    moved = sticky.next_partition("t", 4, available, chosen)
    assert moved != chosen and moved in available
    assert sticky.partition("t", 4, available) == moved


def test_sticky_partitioner_prefers_available_partitions_and_spreads() -> None:
    sticky = StickyPartitioner()
    counts: collections.Counter[int] = collections.Counter()
    previous = sticky.partition("t", 6, [1, 4])
    for _ in range(200):
        previous = sticky.next_partition("t", 6, [1, 4], previous)
        counts[previous] += 1
    assert set(counts) == {1, 4}  # never a partition without a leader while others have one


def test_sticky_partitioner_single_partition() -> None:
    sticky = StickyPartitioner()
    assert sticky.next_partition("t", 1, [0], 0) == 0
