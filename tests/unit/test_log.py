"""The partition log: appends, rolls, reads, timestamps, retention, truncation and crash recovery."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from bus.log import files
from bus.log.config import LogConfig
from bus.log.errors import LogClosedError, OffsetOutOfRangeError, RecordBatchTooLargeError
from bus.log.log import AppendResult, Log, ReadResult
from bus.protocol import records as rb

TS = 1_700_000_000_000


class Clock:
    def __init__(self, now: int = TS) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def batch(values: list[bytes], *, ts: int = TS, keys: list[bytes] | None = None, codec: int = 0) -> bytes:
    keys = keys or [None] * len(values)  # type: ignore[list-item]
    return rb.build_batch(
        [rb.Record(i, ts + i, k, v) for i, (k, v) in enumerate(zip(keys, values, strict=True))],
        base_offset=0,
        compression=codec,
    )


def append(log: Log, *batches: bytes) -> AppendResult:
    payload = bytearray(b"".join(batches))
    return log.append(payload, rb.scan_batches(payload))


def open_log(path: Path, clock: Clock | None = None, **config: object) -> Log:
    return Log(path, LogConfig(**config), now_ms=clock or Clock())  # type: ignore[arg-type]


def read_records(log: Log, start: int | None = None) -> list[tuple[int, bytes | None]]:
    """Every record from `start` (default: the log start) by fetching like a consumer."""
    offset = log.log_start_offset if start is None else start
    out: list[tuple[int, bytes | None]] = []
    while offset < log.log_end_offset:
        result = log.read(offset, 1000)
        if result.first_batch_offset is None:
            break
        data = bytes(result.data)
        batches = rb.scan_batches_prefix(data)[0]
        assert sum(b.size for b in batches) == len(data), "reads return whole batches only"
        for info in batches:
            out += [(r.offset, r.value) for r in rb.iter_records(data, info) if r.offset >= offset]
        offset = batches[-1].next_offset
    return out


def values(n: int, prefix: str = "v") -> list[bytes]:
    return [f"{prefix}{i:04d}".encode() for i in range(n)]


# ---------------------------------------------------------------------------------------- append and read


def test_offsets_are_assigned_consecutively_across_batches(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    first = append(log, batch(values(3)), batch(values(2)))
    second = append(log, batch(values(4)))
    assert (first.base_offset, first.last_offset, second.base_offset, second.last_offset) == (0, 4, 5, 8)
    assert first.log_append_time == -1 and first.log_start_offset == 0
    assert log.log_end_offset == 9
    assert read_records(log) == list(enumerate(values(3) + values(2) + values(4)))


def test_rolls_by_size_and_reads_across_segments(tmp_path: Path) -> None:
    one = batch(values(5))
    log = open_log(tmp_path / "t-0", segment_bytes=len(one) * 3, index_interval_bytes=50)
    for _ in range(10):
        append(log, one)
    assert [s.base_offset for s in log.segments] == [0, 15, 30, 45]
    assert all(s.size <= len(one) * 3 for s in log.segments)
    assert [s.path.name for s in log.segments][1] == "00000000000000000015.log"
    assert read_records(log) == [(i, v) for i, v in enumerate(values(5) * 10)]
    assert read_records(log, 17)[0] == (17, b"v0002")


def test_rolls_by_time_from_the_first_append(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path / "t-0", clock, segment_ms=1000)
    clock.now += 5000
    append(log, batch(values(1)))  # an empty segment never rolls by time; this one starts its clock now
    clock.now += 1000
    append(log, batch(values(1)))
    assert len(log.segments) == 1
    clock.now += 1
    append(log, batch(values(1)))
    assert [s.base_offset for s in log.segments] == [0, 2]


def test_rolls_when_the_index_is_full(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_index_bytes=24, index_interval_bytes=0)
    for _ in range(9):
        append(log, batch(values(1)))
    # an entry for every batch but a segment's first: 3 entries fit, so 4 batches per segment
    assert [s.base_offset for s in log.segments] == [0, 4, 8]


def test_payload_larger_than_a_segment(tmp_path: Path) -> None:
    big = batch(values(100))
    log = open_log(tmp_path / "t-0", segment_bytes=len(big) - 1)
    with pytest.raises(RecordBatchTooLargeError):
        append(log, big)
    assert log.log_end_offset == 0


def test_read_returns_the_batch_containing_the_offset(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    append(log, batch(values(10)), batch(values(10)))
    result = log.read(15, 10_000)
    assert result.first_batch_offset == 10
    assert [b.base_offset for b in rb.scan_batches(bytes(result.data))] == [10]
    assert log.read(0, 10_000).first_batch_offset == 0


def test_max_bytes_returns_whole_batches_and_min_one_batch(tmp_path: Path) -> None:
    one = batch(values(5))
    log = open_log(tmp_path / "t-0", index_interval_bytes=len(one))
    for _ in range(20):
        append(log, one)
    result = log.read(0, int(len(one) * 2.5))
    assert len(result.data) == 2 * len(one)
    result = log.read(52, len(one) * 7 + 3)
    assert (result.first_batch_offset, len(result.data)) == (50, 7 * len(one))
    assert len(log.read(0, 10).data) == len(one)  # bigger than max_bytes, still returned whole
    assert len(log.read(0, 0).data) == len(one)
    assert log.read(0, 10, min_one_batch=False) == log.read(0, 0, min_one_batch=False)
    assert log.read(0, 10, min_one_batch=False).first_batch_offset is None
    assert len(log.read(0, 10**9).data) == 20 * len(one)


def bases(result: ReadResult) -> list[int]:
    return [b.base_offset for b in rb.scan_batches(bytes(result.data))]


def test_max_offset_stops_before_batches_starting_there(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    for _ in range(10):
        append(log, batch(values(4)))
    assert bases(log.read(0, 10**6, max_offset=12)) == [0, 4, 8]
    assert bases(log.read(0, 10**6, max_offset=13)) == [0, 4, 8, 12]  # 12..15 straddles: it is returned
    assert log.read(12, 10**6, max_offset=12).first_batch_offset is None
    assert log.read(13, 10**6, max_offset=14).first_batch_offset == 12


def test_a_read_stays_within_one_segment(tmp_path: Path) -> None:
    """As in Kafka, a fetch returns data from one segment; the consumer's next fetch moves on."""
    log = open_log(tmp_path / "t-0", segment_bytes=400)
    for _ in range(10):
        append(log, batch(values(4)))
    assert [s.base_offset for s in log.segments][:2] == [0, 12]
    assert bases(log.read(0, 10**6)) == [0, 4, 8]
    assert bases(log.read(20, 10**6, max_offset=22)) == [20]


def test_offsets_outside_the_log(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    assert log.read(0, 100) == log.read(0, 100, max_offset=0)
    assert log.read(0, 100).first_batch_offset is None
    append(log, batch(values(3)))
    assert log.read(3, 100).first_batch_offset is None  # the log end offset: nothing yet, not an error
    with pytest.raises(OffsetOutOfRangeError):
        log.read(4, 100)
    log.delete_records_before(2)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(1, 100)


def test_log_append_time(tmp_path: Path) -> None:
    clock = Clock(TS + 123_456)
    log = open_log(tmp_path / "t-0", clock, message_timestamp_type="LogAppendTime")
    result = append(log, batch(values(3), codec=1))
    assert result.log_append_time == TS + 123_456
    data = bytes(log.read(0, 10_000).data)
    [info] = rb.scan_batches(data)  # CRC recomputed
    assert info.timestamp_type == rb.LOG_APPEND_TIME and info.max_timestamp == TS + 123_456
    assert {r.timestamp for r in rb.iter_records(data, info)} == {TS + 123_456}
    assert log.max_timestamp_and_offset() == (TS + 123_456, 0)


def test_index_files_use_kafkas_format(tmp_path: Path) -> None:
    one = batch(values(2))
    log = open_log(tmp_path / "t-0", index_interval_bytes=len(one) - 1)
    for i in range(4):
        append(log, batch(values(2), ts=TS + 100 * i))
    segment = log.segments[0]
    index = segment.path.with_suffix(".index").read_bytes()
    assert [struct.unpack_from(">iI", index, i) for i in range(0, len(index), 8)] == [
        (3, len(one)), (5, 2 * len(one)), (7, 3 * len(one))
    ]  # fmt: skip
    log.close()
    time_index = segment.path.with_suffix(".timeindex").read_bytes()
    assert [struct.unpack_from(">qi", time_index, i) for i in range(0, len(time_index), 12)] == [
        (TS + 101, 3), (TS + 201, 5), (TS + 301, 7)
    ]  # fmt: skip


# ------------------------------------------------------------------------------------------ timestamps


def test_offset_for_timestamp(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=300, index_interval_bytes=10)
    for i in range(12):
        append(log, batch(values(3), ts=TS + 1000 * i))  # records at TS+1000i, +1, +2
    assert len(log.segments) > 3
    assert log.offset_for_timestamp(0) == (TS, 0)
    assert log.offset_for_timestamp(TS + 5000) == (TS + 5000, 15)
    assert log.offset_for_timestamp(TS + 5001) == (TS + 5001, 16)
    assert log.offset_for_timestamp(TS + 5003) == (TS + 6000, 18)
    assert log.offset_for_timestamp(TS + 11_002) == (TS + 11_002, 35)
    assert log.offset_for_timestamp(TS + 11_003) is None
    log.delete_records_before(16)
    assert log.offset_for_timestamp(0) == (TS + 5001, 16)


def test_timestamps_out_of_order(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", index_interval_bytes=0)
    for ts in (TS + 50, TS + 10, TS + 90, TS + 20):
        append(log, rb.build_batch([(0, ts, None, b"x")], base_offset=0))
    assert log.offset_for_timestamp(TS + 15) == (TS + 50, 0)
    assert log.offset_for_timestamp(TS + 60) == (TS + 90, 2)
    assert log.max_timestamp_and_offset() == (TS + 90, 2)


def test_max_timestamp_of_an_empty_log(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    assert log.max_timestamp_and_offset() == (-1, -1)
    assert log.offset_for_timestamp(0) is None


def test_max_timestamp_inside_a_batch(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    append(log, rb.build_batch([(0, TS, None, b"a"), (1, TS + 9, None, b"b"), (2, TS + 9, None, b"c")], base_offset=0))
    append(log, rb.build_batch([(0, TS + 5, None, b"d")], base_offset=0))
    assert log.max_timestamp_and_offset() == (TS + 9, 1)


# ------------------------------------------------------------------------------- retention and deletion


def test_retention_by_time_deletes_old_non_active_segments(tmp_path: Path) -> None:
    clock = Clock(TS + 10_000)
    log = open_log(tmp_path / "t-0", clock, segment_bytes=250, retention_ms=5000)
    for i in range(9):
        append(log, batch(values(2), ts=TS + 1000 * i))
    bases = [s.base_offset for s in log.segments]
    assert len(bases) >= 4
    assert log.enforce_retention() > 0
    survivors = log.segments
    assert survivors[-1].base_offset == bases[-1]  # the active segment stays, whatever its age
    assert log.log_start_offset == survivors[0].base_offset > 0
    assert log.offset_for_timestamp(TS + 4000)[1] >= log.log_start_offset
    clock.now = TS + 10**9
    log.enforce_retention()
    assert [s.base_offset for s in log.segments] == [bases[-1]]
    assert read_records(log) == [(16, b"v0000"), (17, b"v0001")]


def test_retention_by_size(tmp_path: Path) -> None:
    one = batch(values(2))
    log = open_log(tmp_path / "t-0", segment_bytes=len(one) * 2, retention_bytes=len(one) * 5, retention_ms=-1)
    for _ in range(10):
        append(log, one)
    assert log.size_bytes == 10 * len(one)
    assert log.enforce_retention() == 2  # 10 -> 6 batches; one more segment would go below 5
    assert log.size_bytes == 6 * len(one) and log.log_start_offset == 8


def test_retention_only_with_the_delete_policy(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", Clock(TS + 10**9), segment_bytes=200, retention_ms=1,
                   cleanup_policy=frozenset({"compact"}))  # fmt: skip
    for _ in range(5):
        append(log, batch(values(2)))
    assert log.enforce_retention() == 0


def test_delete_records_before(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=250)
    for _ in range(6):
        append(log, batch(values(3)))
    bases = [s.base_offset for s in log.segments]
    assert log.delete_records_before(4) == 4
    assert log.delete_records_before(2) == 4  # never moves back
    assert [s.base_offset for s in log.segments] == bases
    assert read_records(log)[0] == (4, b"v0001")
    target = bases[2] + 1
    assert log.delete_records_before(target) == target
    assert log.segments[0].base_offset == bases[2]
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records_before(log.log_end_offset + 1)
    log.close()
    reopened = open_log(tmp_path / "t-0", segment_bytes=250)
    assert reopened.log_start_offset == target


def test_delete_records_up_to_the_end_then_retention_keeps_the_active_segment(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=200)
    for _ in range(4):
        append(log, batch(values(2)))
    end = log.log_end_offset
    log.delete_records_before(end)
    log.enforce_retention()
    assert log.log_start_offset == end == log.log_end_offset
    assert append(log, batch(values(1))).base_offset == end


def test_delete_removes_the_directory(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    append(log, batch(values(2)))
    log.delete()
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(LogClosedError):
        log.read(0, 10)


# --------------------------------------------------------------------------------------- truncation


def test_truncate_to_within_and_across_segments(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=250, index_interval_bytes=1)
    for _ in range(8):
        append(log, batch(values(2)))
    log.truncate_to(20)  # past the end: nothing to do
    assert log.log_end_offset == 16
    log.truncate_to(9)  # 8..9 straddles 9: the whole batch goes
    assert log.log_end_offset == 8
    assert read_records(log)[-1] == (7, b"v0001")
    assert append(log, batch(values(1))).base_offset == 8
    log.truncate_to(0)
    assert (log.log_start_offset, log.log_end_offset, len(log.segments)) == (0, 0, 1)


def test_truncate_below_the_first_segment_restarts_there(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=200)
    for _ in range(6):
        append(log, batch(values(2)))
    log.delete_records_before(6)
    log.enforce_retention()
    log.truncate_to(3)
    assert (log.log_start_offset, log.log_end_offset) == (3, 3)
    assert append(log, batch(values(1))).base_offset == 3


def test_append_as_is_keeps_offsets_and_allows_gaps(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    payload = rb.build_batch([(10, TS, None, b"a"), (12, TS, None, b"b")], base_offset=10) + rb.build_batch(
        [(40, TS, None, b"c")], base_offset=40
    )
    batches = rb.scan_batches_prefix(payload)[0]
    result = log.append_as_is(payload, batches)
    assert (result.base_offset, result.last_offset, log.log_end_offset) == (10, 40, 41)
    assert read_records(log, 0) == [(10, b"a"), (12, b"b"), (40, b"c")]
    with pytest.raises(ValueError, match="below"):
        log.append_as_is(payload, batches)


def test_far_offsets_roll_a_new_segment(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    append(log, batch(values(1)))
    far = rb.build_batch([(2**31 + 5, TS, None, b"far")], base_offset=2**31 + 5)
    log.append_as_is(far, rb.scan_batches(far))
    assert [s.base_offset for s in log.segments] == [0, 2**31 + 5]


# ---------------------------------------------------------------------------------- durability and recovery


def test_clean_reopen_restores_state(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=300, index_interval_bytes=20)
    for i in range(10):
        append(log, batch(values(3), ts=TS + i))
    log.delete_records_before(4)
    state = (log.log_start_offset, log.log_end_offset, log.segments, log.max_timestamp_and_offset(), read_records(log))
    log.close()
    assert (tmp_path / "t-0" / files.CLEAN_SHUTDOWN).exists()
    reopened = open_log(tmp_path / "t-0", segment_bytes=300, index_interval_bytes=20)
    assert not (tmp_path / "t-0" / files.CLEAN_SHUTDOWN).exists()
    assert state == (reopened.log_start_offset, reopened.log_end_offset, reopened.segments,
                     reopened.max_timestamp_and_offset(), read_records(reopened))  # fmt: skip
    assert append(reopened, batch(values(1))).base_offset == 30


def crash(log: Log) -> None:
    """Drop a log without closing it, as kill -9 would: no flush, no marker (descriptors just leak)."""
    del log


@pytest.mark.parametrize("tail", ["torn", "garbage", "zeros"])
def test_recovery_cuts_a_bad_tail_and_continues(tmp_path: Path, tail: str) -> None:
    log = open_log(tmp_path / "t-0", index_interval_bytes=30)
    for i in range(10):
        append(log, batch(values(2), ts=TS + i))
    expected = read_records(log)
    active = log.segments[-1].path
    good_size = active.stat().st_size
    crash(log)
    junk = {
        "torn": batch(values(5))[:40],
        "garbage": os.urandom(500),
        "zeros": bytes(4096),  # a filesystem that extended the file but lost the data
    }[tail]
    with open(active, "ab") as f:
        f.write(junk)
    recovered = open_log(tmp_path / "t-0", index_interval_bytes=30)
    assert active.stat().st_size == good_size
    assert recovered.log_end_offset == 20
    assert read_records(recovered) == expected
    assert recovered.offset_for_timestamp(TS + 5) == (TS + 5, 9)  # batch 4's second record
    assert append(recovered, batch(values(1))).base_offset == 20


def test_recovery_drops_segments_after_a_corrupt_one(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=250)
    for _ in range(8):
        append(log, batch(values(2)))
    segments = log.segments
    crash(log)
    victim = segments[1].path
    data = bytearray(victim.read_bytes())
    data[-10] ^= 0xFF  # the last batch of the second segment
    victim.write_bytes(data)
    recovered = open_log(tmp_path / "t-0", segment_bytes=250)
    assert [s.base_offset for s in recovered.segments] == [s.base_offset for s in segments[:2]]
    batches_in_victim = segments[1].size // len(batch(values(2)))
    assert recovered.log_end_offset == segments[1].base_offset + 2 * (batches_in_victim - 1)
    assert not segments[2].path.exists()


def test_recovery_is_limited_to_unflushed_segments(tmp_path: Path) -> None:
    """Segments below the recovery point are trusted: a flushed segment is not rescanned."""
    log = open_log(tmp_path / "t-0", segment_bytes=250)
    for _ in range(8):
        append(log, batch(values(2)))
    log.flush()
    assert files.read_offset(tmp_path / "t-0" / files.RECOVERY_POINT) == 16
    append(log, batch(values(2)))
    segments = log.segments
    crash(log)
    old = segments[0].path
    data = bytearray(old.read_bytes())
    data[-10] ^= 0xFF  # would be cut if it were scanned
    old.write_bytes(data)
    recovered = open_log(tmp_path / "t-0", segment_bytes=250)
    assert recovered.segments == segments


def test_missing_or_damaged_indexes_are_rebuilt(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=400, index_interval_bytes=20)
    for i in range(10):
        append(log, batch(values(3), ts=TS + 10 * i))
    expected = read_records(log)
    segments = log.segments
    log.close()
    index = segments[0].path.with_suffix(".index")
    time_index = segments[1].path.with_suffix(".timeindex")
    stale_index = segments[2].path.with_suffix(".index")
    original = (index.read_bytes(), time_index.read_bytes(), stale_index.read_bytes())
    index.unlink()
    time_index.write_bytes(original[1][:-5])  # not a whole number of entries
    stale_index.write_bytes(original[2] + struct.pack(">II", 1, 0))  # an entry that disagrees with the log
    reopened = open_log(tmp_path / "t-0", segment_bytes=400, index_interval_bytes=20)
    assert (index.read_bytes(), time_index.read_bytes(), stale_index.read_bytes()) == original
    assert read_records(reopened) == expected
    assert reopened.offset_for_timestamp(TS + 45) == (TS + 50, 15)


def test_flush_messages_moves_the_recovery_point(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", flush_messages=3)
    checkpoint = tmp_path / "t-0" / files.RECOVERY_POINT
    append(log, batch(values(2)))
    assert files.read_offset(checkpoint) is None
    append(log, batch(values(2)))
    assert files.read_offset(checkpoint) == 4


def test_rolled_segments_are_flushed_by_the_periodic_flusher(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path / "t-0", clock, segment_bytes=200, flush_ms=60_000)
    for _ in range(4):
        append(log, batch(values(2)))
    active = log.segments[-1].base_offset
    assert log.flush_if_due(clock.now)
    assert files.read_offset(tmp_path / "t-0" / files.RECOVERY_POINT) == active
    assert not log.flush_if_due(clock.now)
    assert log.flush_if_due(clock.now + 60_000)
    assert files.read_offset(tmp_path / "t-0" / files.RECOVERY_POINT) == log.log_end_offset


def test_config_changes_apply_live(tmp_path: Path) -> None:
    one = batch(values(2))
    log = open_log(tmp_path / "t-0")
    for _ in range(4):
        append(log, one)
    log.update_config(LogConfig(segment_bytes=len(one) * 4))
    append(log, one)
    assert len(log.segments) == 2
    assert log.config.segment_bytes == len(one) * 4


def test_index_entries_reach_their_files_as_the_appends_that_add_them_return(tmp_path: Path) -> None:
    """Appends write the index files only when they add entries (every index.interval.bytes), never leave one
    behind: what the files hold always matches the entries in memory."""
    log = open_log(tmp_path, index_interval_bytes=200)
    for i in range(40):
        append(log, batch([b"v" * 50 + bytes([i])]))
        segment = log._segments[-1]
        for index in (segment.offset_index, segment.time_index):
            assert os.path.getsize(index.path) == len(index) * index.entry_size
    assert len(log._segments[-1].offset_index) > 5
    assert [value for _offset, value in read_records(log)] == [b"v" * 50 + bytes([i]) for i in range(40)]
