"""The leader-epoch cache: Kafka's LeaderEpochFileCache rules (cases from its LeaderEpochFileCacheTest) and
its checkpoint file, which must stay readable by Kafka's own LeaderEpochCheckpointFile."""

from __future__ import annotations

from pathlib import Path

import pytest

from bus.log.leader_epoch_cache import (
    CHECKPOINT,
    CorruptCheckpointError,
    EpochEntry,
    LeaderEpochFileCache,
    read_checkpoint,
)

UNDEFINED = (-1, -1)


def cache_with(tmp_path: Path, *entries: tuple[int, int]) -> LeaderEpochFileCache:
    cache = LeaderEpochFileCache(tmp_path / CHECKPOINT)
    for epoch, start in entries:
        cache.assign(epoch, start)
    return cache


def test_assigned_epoch_answers_with_the_log_end_offset(tmp_path: Path) -> None:
    cache = cache_with(tmp_path, (2, 10))
    assert cache.latest_epoch == 2
    assert cache.end_offset_for(2, 11) == (2, 11)


def test_latest_epoch_ends_at_the_log_end(tmp_path: Path) -> None:
    cache = cache_with(tmp_path, (2, 5), (3, 6), (4, 7))
    assert cache.end_offset_for(4, 11) == (4, 11)


def test_undefined_epoch_and_empty_cache_answer_undefined(tmp_path: Path) -> None:
    assert cache_with(tmp_path).end_offset_for(7, 0) == UNDEFINED
    assert cache_with(tmp_path, (2, 5)).end_offset_for(-1, 10) == UNDEFINED


def test_an_epoch_keeps_its_first_start_offset(tmp_path: Path) -> None:
    cache = cache_with(tmp_path, (2, 6))
    assert cache.assign(2, 7) is False
    assert cache.entries == [EpochEntry(2, 6)]


def test_epoch_below_every_cached_one_answers_itself_with_the_first_start(tmp_path: Path) -> None:
    cache = cache_with(tmp_path, (5, 11), (6, 12))
    assert cache.end_offset_for(4, 20) == (4, 11)


def test_previous_epoch_ends_where_the_next_starts(tmp_path: Path) -> None:
    cache = cache_with(tmp_path, (1, 5), (1, 6), (2, 7))
    assert cache.end_offset_for(1, 10) == (1, 7)


def test_unknown_epoch_between_two_answers_the_one_below(tmp_path: Path) -> None:
    cache = cache_with(tmp_path, (0, 10), (2, 13), (4, 17))
    assert cache.end_offset_for(1, 20) == (0, 13)
    assert cache.end_offset_for(2, 20) == (2, 17)
    assert cache.end_offset_for(3, 20) == (2, 17)
    assert cache.end_offset_for(0, 20) == (0, 13)


def test_epoch_past_the_latest_answers_undefined(tmp_path: Path) -> None:
    cache = cache_with(tmp_path, (2, 100))
    assert cache.end_offset_for(3, 150) == UNDEFINED


def test_a_lower_epoch_drops_the_newer_ones(tmp_path: Path) -> None:
    cache = cache_with(tmp_path, (1, 5), (2, 6))
    assert cache.assign(1, 7)
    assert cache.entries == [EpochEntry(1, 7)]
    assert cache.latest_epoch == 1


def test_a_lower_start_offset_drops_entries_at_or_after_it(tmp_path: Path) -> None:
    cache = cache_with(tmp_path, (2, 6), (3, 8))
    assert cache.assign(4, 7)
    assert cache.entries == [EpochEntry(2, 6), EpochEntry(4, 7)]


def test_negative_entries_are_refused(tmp_path: Path) -> None:
    cache = cache_with(tmp_path)
    with pytest.raises(ValueError, match="invalid"):
        cache.assign(-1, 0)
    with pytest.raises(ValueError, match="invalid"):
        cache.assign(0, -1)


@pytest.mark.parametrize(
    ("end", "expected"),
    [
        (9, [(2, 6), (3, 8)]),
        (8, [(2, 6)]),
        (6, []),
        (11, [(2, 6), (3, 8)]),
        (12, [(2, 6), (3, 8), (4, 11)]),
        (-1, [(2, 6), (3, 8), (4, 11)]),  # an undefined offset leaves the cache alone
    ],
)
def test_truncate_from_end(tmp_path: Path, end: int, expected: list[tuple[int, int]]) -> None:
    cache = cache_with(tmp_path, (2, 6), (3, 8), (4, 11))
    cache.truncate_from_end(end)
    assert cache.entries == expected
    assert cache.latest_epoch == (expected[-1][0] if expected else -1)
    assert read_checkpoint(cache.path) == expected


@pytest.mark.parametrize(
    ("start", "expected"),
    [
        (8, [(3, 8), (4, 11)]),
        (9, [(3, 9), (4, 11)]),
        (1, [(2, 6), (3, 8), (4, 11)]),
        (6, [(2, 6), (3, 8), (4, 11)]),
        (15, [(4, 15)]),
        (-1, [(2, 6), (3, 8), (4, 11)]),
    ],
)
def test_truncate_from_start(tmp_path: Path, start: int, expected: list[tuple[int, int]]) -> None:
    cache = cache_with(tmp_path, (2, 6), (3, 8), (4, 11))
    cache.truncate_from_start(start)
    assert cache.entries == expected
    assert read_checkpoint(cache.path) == expected


def test_epoch_for_offset(tmp_path: Path) -> None:
    cache = cache_with(tmp_path, (1, 5), (3, 10))
    assert [cache.epoch_for_offset(o) for o in (4, 5, 9, 10, 99)] == [None, 1, 1, 3, 3]


def test_clear(tmp_path: Path) -> None:
    cache = cache_with(tmp_path, (1, 5), (3, 10))
    cache.clear()
    assert cache.entries == [] and cache.latest_epoch == -1
    assert read_checkpoint(cache.path) == []


def test_checkpoint_is_kafkas_format_and_survives_a_new_instance(tmp_path: Path) -> None:
    cache = cache_with(tmp_path, (0, 0), (2, 6), (3, 8))
    assert cache.path.read_text() == "0\n3\n0 0\n2 6\n3 8\n"
    assert not (tmp_path / (CHECKPOINT + ".tmp")).exists()
    again = LeaderEpochFileCache(cache.path, read_checkpoint(cache.path))
    assert again.entries == cache.entries and again.latest_epoch == 3


def test_reads_a_checkpoint_kafka_wrote(tmp_path: Path) -> None:
    path = tmp_path / CHECKPOINT
    path.write_text("0\n2\n0 0\n5   1234\n")  # Kafka splits on any whitespace
    assert read_checkpoint(path) == [(0, 0), (5, 1234)]


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"0\n",
        b"1\n1\n0 0\n",
        b"0\n2\n0 0\n",
        b"0\n1\n0 0\n1 5\n",
        b"0\n1\n0\n",
        b"0\n1\nzero 0\n",
        b"\x00\xff\x13garbage",
    ],
)
def test_corrupt_checkpoints_are_refused(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / CHECKPOINT
    path.write_bytes(content)
    with pytest.raises(CorruptCheckpointError):
        read_checkpoint(path)


def test_missing_checkpoint(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_checkpoint(tmp_path / CHECKPOINT)
