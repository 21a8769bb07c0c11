"""Log compaction: what survives a clean, what the batches keep, when cleaning runs, and crash safety."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

from bus.log import files
from bus.log.cleaner import clean
from bus.log.config import LogConfig
from bus.log.log import Log
from bus.protocol import records as rb

TS = 1_700_000_000_000
DAY = 86_400_000


def open_log(path: Path, now: int = TS, **config: object) -> Log:
    settings = {"cleanup_policy": frozenset({"compact"}), "segment_bytes": 600, "min_cleanable_dirty_ratio": 0.0}
    return Log(path, LogConfig(**{**settings, **config}), now_ms=lambda: now)  # type: ignore[arg-type]


def put(log: Log, *pairs: tuple[bytes | None, bytes | None], ts: int = TS, **batch_args: object) -> None:
    payload = bytearray(rb.build_batch([rb.Record(i, ts + i, k, v) for i, (k, v) in enumerate(pairs)],
                                       base_offset=0, **batch_args))  # type: ignore[arg-type]  # fmt: skip
    batches = rb.scan_batches(payload)
    log.append(payload, batches)


def contents(log: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        result = log.read(offset, 1 << 20)
        if result.first_batch_offset is None:
            break
        data = bytes(result.data)
        batches = rb.scan_batches_prefix(data)[0]
        for info in batches:
            out += [(r.offset, r.key, r.value) for r in rb.iter_records(data, info)]
        offset = batches[-1].next_offset
    return out


def stored_batches(log: Log) -> list[rb.BatchInfo]:
    return [b for s in log.segments for b in rb.scan_batches_prefix(s.path.read_bytes())[0]]


def fill(log: Log, rounds: int, keys: int = 5) -> None:
    for r in range(rounds):
        for k in range(keys):
            put(log, (b"k%d" % k, b"r%d-k%d" % (r, k)))


def test_keeps_the_latest_value_per_key_with_its_offset(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    fill(log, 6)
    active_base = log.segments[-1].base_offset
    assert len(log.segments) > 2
    stats = clean(log, TS)
    assert stats is not None and stats.end_offset == active_base
    assert stats.records_retained < stats.records_read
    survivors = contents(log)
    cleaned = [r for r in survivors if r[0] < active_base]
    latest = {}
    for offset in range(active_base):
        latest[b"k%d" % (offset % 5)] = offset
    assert [r[0] for r in cleaned] == sorted(latest.values())
    assert all(value == b"r%d-k%d" % (offset // 5, offset % 5) for offset, _, value in survivors)
    assert [r[0] for r in survivors if r[0] >= active_base] == list(range(active_base, 30))  # active untouched
    assert log.log_end_offset == 30


def test_a_second_pass_starts_at_the_checkpoint(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    fill(log, 6)
    first = clean(log, TS)
    assert first is not None
    assert clean(log, TS) is None  # nothing dirty
    fill(log, 4)
    second = clean(log, TS)
    assert second is not None and second.first_dirty_offset == first.end_offset
    assert files.read_offset(tmp_path / "t-0" / files.CLEANER_CHECKPOINT) == second.end_offset
    keys_below_end = [k for offset, k, _ in contents(log) if offset < second.end_offset]
    assert sorted(keys_below_end) == sorted(set(keys_below_end))


def test_segments_shrunk_by_cleaning_merge_next_time(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=300)
    fill(log, 10, keys=2)
    first = clean(log, TS)
    assert first is not None and first.segments_out == first.segments_in  # each was full: no room to merge
    fill(log, 2, keys=2)
    before = len(log.segments)
    second = clean(log, TS)
    assert second is not None and second.segments_out < second.segments_in
    assert len(log.segments) == before - second.segments_in + second.segments_out


def test_dirty_ratio_and_force(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", min_cleanable_dirty_ratio=0.5)
    fill(log, 1, keys=30)  # distinct keys: cleaning keeps them all
    log.roll()
    assert clean(log, TS) is not None
    put(log, (b"k0", b"again"))
    log.roll()
    assert clean(log, TS) is None  # a small dirty share
    assert clean(log, TS, force=True) is not None


def test_min_compaction_lag_holds_back_recent_segments(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", min_compaction_lag_ms=10_000)
    for r in range(6):
        for k in range(5):
            put(log, (b"k%d" % k, b"r%d" % r), ts=TS + 1000 * r)
    assert clean(log, TS + 5_000) is None  # every segment has records younger than the lag
    stats = clean(log, TS + 12_500)
    assert stats is not None
    newest_cleanable = max(s.base_offset for s in log.segments[:-1])
    assert 0 < stats.end_offset <= newest_cleanable


def test_max_compaction_lag_forces_a_clean_below_the_ratio(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", min_cleanable_dirty_ratio=0.9, max_compaction_lag_ms=60_000)
    fill(log, 1, keys=30)
    log.roll()
    assert clean(log, TS) is not None  # all dirty: the ratio is 1
    put(log, (b"k0", b"again"))
    log.roll()
    assert clean(log, TS) is None
    assert clean(log, TS + 120_000) is not None


def test_only_compacted_topics_are_cleaned(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", cleanup_policy=frozenset({"delete"}))
    fill(log, 6)
    assert clean(log, TS, force=True) is None


def test_tombstones_stay_until_the_delete_horizon(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", delete_retention_ms=DAY)
    fill(log, 3)
    put(log, (b"k1", None))
    fill(log, 1, keys=1)  # k0 again, so the tombstone's batch is not the last
    log.roll()
    assert clean(log, TS) is not None
    assert (15, b"k1", None) in contents(log)
    [tombstone_batch] = [b for b in stored_batches(log) if b.base_offset == 15]
    assert tombstone_batch.delete_horizon_ms == TS + DAY
    assert clean(log, TS + DAY - 1, force=True) is not None
    assert (15, b"k1", None) in contents(log)
    assert clean(log, TS + DAY, force=True) is not None
    assert [k for _, k, _ in contents(log)].count(b"k1") == 0
    assert (15, b"k1", None) not in contents(log)


def test_batches_keep_offsets_producer_fields_flags_and_codec(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    put(log, (b"a", b"1"), (b"b", b"1"), (b"c", b"1"), compression=3,
        producer_id=42, producer_epoch=3, base_sequence=7, is_transactional=True)  # fmt: skip
    put(log, (b"a", b"2"), producer_id=43, producer_epoch=0, base_sequence=0)
    control = bytearray(
        rb.build_batch(
            [(0, TS, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00")],
            base_offset=0,
            is_control=True,
            is_transactional=True,
            producer_id=42,
            producer_epoch=3,
        )
    )
    log.append(control, rb.scan_batches(control))
    log.roll()
    assert clean(log, TS, force=True) is not None
    first, second, marker = stored_batches(log)
    assert (first.base_offset, first.last_offset, first.records_count) == (0, 2, 2)
    assert (first.producer_id, first.producer_epoch, first.base_sequence) == (42, 3, 7)
    assert first.is_transactional and first.compression == 3
    assert second.base_offset == 3 and marker.is_control and marker.base_offset == 4
    assert [(o, k, v) for o, k, v in contents(log)][:2] == [(1, b"b", b"1"), (2, b"c", b"1")]


def test_an_emptied_batch_survives_only_as_its_producers_last(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    put(log, (b"a", b"1"), producer_id=7, producer_epoch=0, base_sequence=0)  # 0: emptied, not 7's last
    put(log, (b"a", b"2"), producer_id=7, producer_epoch=0, base_sequence=1)  # 1: emptied, 7's last batch
    put(log, (b"b", b"1"))  # 2: emptied, no producer
    put(log, (b"a", b"3"), (b"b", b"2"))  # 3-4
    put(log, (b"z", b"1"))
    log.roll()
    assert clean(log, TS, force=True) is not None
    kept = [(b.base_offset, b.records_count, b.producer_id) for b in stored_batches(log)]
    assert kept[:2] == [(1, 0, 7), (3, 2, -1)]
    [empty] = [b for b in stored_batches(log) if b.base_offset == 1]
    assert empty.base_sequence == 1 and empty.last_offset == 1


def test_records_without_keys_are_kept(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    put(log, (None, b"x"), (b"k", b"1"))
    put(log, (None, b"y"), (b"k", b"2"))
    log.roll()
    assert clean(log, TS, force=True) is not None
    assert contents(log) == [(0, None, b"x"), (2, None, b"y"), (3, b"k", b"2")]


def test_log_append_time_batches_keep_their_timestamp(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", message_timestamp_type="LogAppendTime", now=TS + 500)
    put(log, (b"a", b"1"), (b"b", b"1"))
    put(log, (b"a", b"2"))
    log.roll()
    assert clean(log, TS + 600, force=True) is not None
    [first, _] = stored_batches(log)
    assert first.timestamp_type == rb.LOG_APPEND_TIME and first.max_timestamp == TS + 500
    assert log.offset_for_timestamp(TS + 500) == (TS + 500, 1)


def test_clean_survives_a_reopen(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    fill(log, 6)
    clean(log, TS)
    expected = contents(log)
    log.close()
    assert contents(open_log(tmp_path / "t-0")) == expected


# ----------------------------------------------------------------------------------- concurrency and crashes


def test_a_log_that_changes_underneath_refuses_the_swap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = open_log(tmp_path / "t-0")
    fill(log, 6)
    before = contents(log)
    real = Log.replace_segments

    def truncate_first(self: Log, *args: object) -> bool:
        self.truncate_to(self.log_end_offset - 1)  # replication truncating while the cleaner works
        return real(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(Log, "replace_segments", truncate_first)
    assert clean(log, TS) is None
    assert contents(log) == before[:-1]
    assert not [p for p in (tmp_path / "t-0").iterdir() if p.name.endswith(files.CLEANED)]


def test_retention_racing_the_cleaner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = open_log(tmp_path / "t-0")
    fill(log, 6)
    real = Log.replace_segments

    def retention_first(self: Log, *args: object) -> bool:
        self.delete_records_before(self.segments[1].base_offset)
        return real(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(Log, "replace_segments", retention_first)
    assert clean(log, TS) is None
    assert contents(log)[0][0] == log.log_start_offset


CRASHING_CLEAN = """
import os, sys
from pathlib import Path
from bus.log.cleaner import clean
from bus.log.config import LogConfig
from bus.log.log import Log

directory, step = Path(sys.argv[1]), sys.argv[2]
trigger, before = {
    "before-commit": (".log.cleaned", True),
    "after-commit": (".log.cleaned", False),
    "after-old-deleted": (".index.cleaned", True),
    "after-index-rename": (".log.swap", True),
}[step]
real_replace = os.replace

def replace(src, dst):
    if str(src).endswith(trigger) and before:
        os._exit(3)
    real_replace(src, dst)
    if str(src).endswith(trigger):
        os._exit(3)

os.replace = replace
config = LogConfig(cleanup_policy=frozenset({"compact"}), segment_bytes=600, min_cleanable_dirty_ratio=0.0)
clean(Log(directory, config, now_ms=lambda: 0), 0)
"""


@pytest.mark.parametrize("step", ["before-commit", "after-commit", "after-old-deleted", "after-index-rename"])
def test_crash_mid_swap_recovers(tmp_path: Path, step: str) -> None:
    """A process killed at each step of the swap: before the `.swap` rename the old segments stand, after
    it the cleaned segment wins. Either way the log reopens consistent, with every key's latest value."""
    log = open_log(tmp_path / "t-0")
    fill(log, 6)
    original = contents(log)
    log.close()
    crashed = subprocess.run([sys.executable, "-c", CRASHING_CLEAN, str(tmp_path / "t-0"), step],
                             cwd=Path(__file__).parents[2], capture_output=True, text=True)  # fmt: skip
    assert crashed.returncode == 3, crashed.stderr
    reopened = open_log(tmp_path / "t-0")
    leftovers = [p.name for p in (tmp_path / "t-0").iterdir() if p.name.endswith((files.CLEANED, files.SWAP))]
    assert leftovers == []
    survivors = contents(reopened)
    assert set(survivors) <= set(original)
    assert [o for o, _, _ in survivors] == sorted({o for o, _, _ in survivors})
    assert {k: v for _, k, v in survivors} == {k: v for _, k, v in original}
    assert (len(survivors) == len(original)) == (step == "before-commit")
    indexes = [s.path.with_suffix(suffix) for s in reopened.segments for suffix in (".index", ".timeindex")]
    assert all(path.exists() for path in indexes)
    assert reopened.log_end_offset == 30
    put(reopened, (b"k9", b"after"))
    assert reopened.log_end_offset == 31


def test_cleaning_in_a_thread_while_appending(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=400)
    fill(log, 10)
    done = threading.Event()
    results = []

    def cleaner() -> None:
        while not done.is_set():
            results.append(clean(log, TS, force=True))

    thread = threading.Thread(target=cleaner)
    thread.start()
    try:
        for r in range(40):
            put(log, (b"k%d" % (r % 7), b"late-%d" % r))
            log.read(log.log_start_offset, 1 << 16)
    finally:
        done.set()
        thread.join()
    assert any(results)
    final = {k: v for _, k, v in contents(log)}
    assert final[b"k6"] == b"late-34" and final[b"k0"] == b"late-35"
    offsets = [o for o, _, _ in contents(log)]
    assert offsets == sorted(set(offsets)) and offsets[-1] == 89
