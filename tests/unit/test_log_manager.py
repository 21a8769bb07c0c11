"""LogManager: placement across log dirs, start-up discovery, deletion and the periodic work."""

from __future__ import annotations

from pathlib import Path

import pytest

from bus.log.config import LogConfig
from bus.log.manager import LogManager
from bus.protocol import records as rb

TS = 1_700_000_000_000


def put(log, *values: bytes, key: bytes | None = None) -> None:  # type: ignore[no-untyped-def]
    payload = bytearray(rb.build_batch([(i, TS, key, v) for i, v in enumerate(values)], base_offset=0))
    log.append(payload, rb.scan_batches(payload))


def test_new_partitions_go_to_the_emptiest_dir(tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    manager = LogManager(dirs, LogConfig())
    logs = [manager.get_or_create("t", p) for p in range(4)]
    assert [log.directory.parent.name for log in logs] == ["a", "b", "a", "b"]
    assert manager.get_or_create("t", 0) is logs[0]
    assert manager.get(("t", 3)) is logs[3] and manager.get(("t", 9)) is None
    assert logs[0].directory.name == "t-0"


def test_load_all_finds_partitions_and_finishes_deletions(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    manager = LogManager(dirs, LogConfig())
    for p in range(3):
        put(manager.get_or_create("my-topic", p), b"x%d" % p)
    manager.get_or_create("other", 0)
    manager.close()
    leftover = dirs[0] / "gone-0.0123456789abcdef0123456789abcdef-delete"
    leftover.mkdir()
    (leftover / "00000000000000000000.log").write_bytes(b"junk")
    (dirs[1] / "__cluster_metadata-0").mkdir()
    (dirs[1] / "not a partition").mkdir()
    (dirs[1] / "meta.properties").write_text("x")

    reopened = LogManager(dirs, LogConfig())
    reopened.load_all(lambda topic: None if topic == "other" else LogConfig(retention_ms=1))
    assert sorted(log.directory.name for log in reopened.all_logs()) == ["my-topic-0", "my-topic-1", "my-topic-2"]
    assert all(log.config.retention_ms == 1 and log.log_end_offset == 1 for log in reopened.all_logs())
    assert not leftover.exists()
    assert reopened.get_or_create("t", 0).directory.parent == dirs[1]  # dir b holds fewer partitions


def test_delete_renames_then_removes(tmp_path: Path) -> None:
    manager = LogManager([tmp_path], LogConfig())
    put(manager.get_or_create("t", 0), b"x")
    remove = manager.delete("t", 0)
    assert manager.delete("t", 0) is None  # already gone: nothing to do
    # The event loop's half only renamed the directory; the files go when the returned work runs.
    [renamed] = tmp_path.iterdir()
    assert renamed.name.endswith("-delete") and manager.all_logs() == []
    assert remove is not None
    remove()
    assert list(tmp_path.iterdir()) == []


def test_periodic_work(tmp_path: Path) -> None:
    now = [TS]
    manager = LogManager([tmp_path], LogConfig(), now_ms=lambda: now[0])
    kept = manager.get_or_create("kept", 0, LogConfig(segment_bytes=200, retention_ms=1000))
    compacted = manager.get_or_create(
        "compacted", 0, LogConfig(segment_bytes=200, cleanup_policy=frozenset({"compact"}), min_cleanable_dirty_ratio=0)
    )
    for i in range(6):
        put(kept, b"v%d" % i)
        put(compacted, b"v%d" % i, key=b"same")
    now[0] = TS + 5000
    segments = len(kept.segments)
    assert manager.enforce_retention() == segments - 1  # compact-only logs are not subject to retention
    assert kept.log_start_offset > 0 and len(kept.segments) == 1
    stats = manager.clean_compacted()
    assert [s.records_retained for s in stats] == [1]  # the latest value below the active segment
    manager.flush_dirty(now[0])
    assert (compacted.directory / "recovery-point").exists()
    manager.close()
    assert manager.all_logs() == []
