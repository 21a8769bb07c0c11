"""The mirror's sans-IO parts: batch selection and rewriting, MM2's formats, offset maps, settings."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from bus.protocol import compression, control_records
from bus.protocol import records as rb
from contracts.config import Config
from dr_mirror import batches as bt
from dr_mirror.formats import Checkpoint, FormatError, OffsetSync
from dr_mirror.offset_map import OffsetMap
from dr_mirror.settings import SettingsError, defaults_from, from_legacy_flags, from_properties

DEFAULTS = defaults_from(Config({}))


def _batch(base: int, n: int, *, codec: int = 0, pid: int = -1, txn: bool = False) -> bytes:
    return rb.build_batch([(base + i, 1000 + i, b"k", b"value-%d" % i) for i in range(n)], base_offset=base,
                          compression=codec, producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
                          base_sequence=0 if pid >= 0 else -1, is_transactional=txn)


def _marker(offset: int, pid: int, commit: bool) -> bytes:
    data = bytearray(control_records.marker_batch(pid, 0, commit, 0, 5000))
    struct.pack_into(">q", data, 0, offset)
    return bytes(data)


# -- batches ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", [compression.NONE, compression.ZSTD, compression.LZ4])
def test_passthrough_keeps_the_compressed_payload_and_makes_a_valid_batch(codec: int) -> None:
    data = _batch(40, 5, codec=codec, pid=7, txn=True)
    (info,) = rb.scan_batches(data)
    out = bt.passthrough(data, info, 123, 4, 77)
    (got,) = rb.scan_batches(out)  # CRC checked
    assert out[rb.BATCH_OVERHEAD:] == data[rb.BATCH_OVERHEAD:]
    assert (got.producer_id, got.producer_epoch, got.base_sequence) == (123, 4, 77)
    assert got.compression == codec and not got.is_transactional
    assert [r.value for r in rb.iter_records(out, got)] == [r.value for r in rb.iter_records(data, info)]


def test_committed_drops_markers_and_aborted_transactions_only() -> None:
    data = (_batch(0, 3, pid=5, txn=True) + _marker(3, 5, True) + _batch(4, 2, pid=6, txn=True)
            + _batch(6, 2, pid=5, txn=True) + _marker(8, 6, False) + _marker(9, 5, True) + _batch(10, 2)
            + _batch(12, 1, pid=6, txn=True) + _marker(13, 6, True))
    found = rb.scan_batches(data)
    kept = bt.committed(data, found, [bt.Aborted(6, 4)], start=0)
    assert [(b.base_offset, b.records_count) for b in kept] == [(0, 3), (6, 2), (10, 2), (12, 1)]
    assert [b.base_offset for b in bt.committed(data, found, [bt.Aborted(6, 4)], start=7)] == [6, 10, 12]
    assert [b.base_offset for b in bt.committed(data, found, [bt.Aborted(6, 4)], start=8)] == [10, 12]


def test_compacted_batches_split_into_dense_runs_with_their_codec() -> None:
    (info,) = rb.scan_batches(_batch(0, 3))
    assert bt.is_dense(info)
    records = [(o, 1, b"k%d" % o, b"v%d" % o) for o in (10, 11, 13, 14, 15, 17)]
    holey = rb.build_batch(records, base_offset=10, last_offset_delta=9, compression=compression.ZSTD)
    (info,) = rb.scan_batches_prefix(holey)[0]
    assert not bt.is_dense(info)
    runs = bt.dense_runs(holey, info, start=11)
    assert [(first, nxt) for _, first, nxt in runs] == [(11, 12), (13, 16), (17, 20)]
    for built, first, _ in runs:
        (got,) = rb.scan_batches(built)
        assert bt.is_dense(got) and got.compression == compression.ZSTD
        assert next(r.value for r in rb.iter_records(built, got)) == b"v%d" % first


def test_small_consecutive_batches_are_joined_up_to_the_limit_and_keep_their_offsets() -> None:
    # Three one-record batches, a compressed one, two more small ones, then one after a gap in offsets.
    data = (_batch(0, 1) + _batch(1, 1) + _batch(2, 1) + _batch(3, 2, codec=compression.ZSTD) + _batch(5, 1)
            + _batch(6, 1) + _batch(9, 1))
    found = rb.scan_batches(data)
    groups = bt.joined(found, start=0, limit=16_384)
    assert [[b.base_offset for b in g] for g in groups] == [[0, 1, 2], [3], [5, 6], [9]]
    merged = bt.merge(data, groups[0])
    (got,) = rb.scan_batches(merged)  # one valid batch, CRC checked
    assert (got.base_offset, got.records_count, got.last_offset_delta) == (0, 3, 2) and bt.is_dense(got)
    records = list(rb.iter_records(merged, got))
    assert [(r.offset, r.timestamp, r.value) for r in records] == [(0, 1000, b"value-0"), (1, 1000, b"value-0"),
                                                                     (2, 1000, b"value-0")]
    # The limit caps a group; a fetch that starts inside the first batch leaves that batch on its own.
    size = found[0].size
    assert [[b.base_offset for b in g] for g in bt.joined(found[:3], start=0, limit=2 * size)] == [[0, 1], [2]]
    two = rb.scan_batches(_batch(0, 2) + _batch(2, 1))
    assert [[b.base_offset for b in g] for g in bt.joined(two, start=1, limit=16_384)] == [[0], [2]]


# -- formats ----------------------------------------------------------------------------------------


def test_offset_sync_bytes_are_kafkas_struct_encoding() -> None:
    sync = OffsetSync("capture.vehicle", 3, 1000, 990)
    assert sync.key() == b"\x00\x0fcapture.vehicle\x00\x00\x00\x03"
    assert sync.value() == struct.pack(">qq", 1000, 990)
    assert OffsetSync.decode(sync.key(), sync.value()) == sync


def test_checkpoint_bytes_have_the_version_header() -> None:
    checkpoint = Checkpoint("ops", "alerts", 1, 20, 13, "meta")
    assert checkpoint.key() == b"\x00\x03ops\x00\x06alerts\x00\x00\x00\x01"
    assert checkpoint.value() == b"\x00\x00" + struct.pack(">qq", 20, 13) + b"\x00\x04meta"
    assert Checkpoint.decode(checkpoint.key(), checkpoint.value()) == checkpoint
    with pytest.raises(FormatError):
        Checkpoint.decode(checkpoint.key(), b"\x00\x01" + checkpoint.value()[2:])
    with pytest.raises(FormatError):
        OffsetSync.decode(b"\x00\x09abc", b"")


# -- offset maps ------------------------------------------------------------------------------------


def _map_with_gaps() -> OffsetMap:
    """Source 0-9 data, 10 marker, 11-15 aborted, 16 marker, 17-26 data, 27 marker: target 0-19."""
    offsets = OffsetMap()
    offsets.add(17, 10)
    offsets.source_position, offsets.target_position = 28, 20
    return offsets


@pytest.mark.parametrize(("source", "target"), [(0, 0), (9, 9), (10, 10), (13, 10), (16, 10), (17, 10), (20, 13),
                                                (27, 20), (28, 20), (29, None)])
def test_translation_is_exact_at_inside_and_after_gaps(source: int, target: int | None) -> None:
    assert _map_with_gaps().translate(source) == target


def test_resume_from_the_target_log_end() -> None:
    offsets = _map_with_gaps()
    assert offsets.resume(15) == 22
    assert offsets.resume(10) == 17
    fresh = OffsetMap()
    assert fresh.resume(42) == 42  # no gaps: target offsets are the source's
    late_start = OffsetMap()
    late_start.add(500, 0)  # the source log started at 500
    assert late_start.resume(0) == 500
    assert late_start.translate(100) == 0  # before the source log start: the target's first record


def test_a_sync_rewritten_after_a_restart_replaces_the_unused_one() -> None:
    offsets = OffsetMap()
    offsets.add(17, 10)
    offsets.add(19, 10)  # the batch after the first sync never landed; the restart found another start
    assert offsets.resume(12) == 21


# -- settings ---------------------------------------------------------------------------------------


def _props(**extra: str) -> dict[str, str]:
    return {"clusters": "primary, dr", "primary.bootstrap.servers": "a:9092", "dr.bootstrap.servers": "b:19092",
            "primary->dr.enabled": "true", **extra}


def test_defaults_mirror_data_topics_not_control_topics() -> None:
    settings = from_properties(_props(), DEFAULTS)
    assert settings.mirrors_topic("capture.vehicle") and settings.mirrors_topic("alerts")
    assert settings.mirrors_topic("control.watchlist") and not settings.mirrors_topic("video.commands")
    assert not settings.mirrors_topic("mm2-offset-syncs.dr.internal")
    assert settings.target_topic("alerts") == "alerts"  # identity naming by default
    assert (settings.source, settings.target) == ("primary", "dr")


def test_flow_keys_beat_top_level_keys_and_client_overrides_layer() -> None:
    settings = from_properties(_props(**{
        "topics": "x.*", "primary->dr.topics": "capture\\..*", "topics.exclude": "capture\\.face",
        "replication.policy.class": "org.apache.kafka.connect.mirror.DefaultReplicationPolicy",
        "tasks.max": "3", "sync.group.offsets.enabled": "true", "primary.consumer.fetch.max.wait.ms": "50",
        "consumer.override.fetch.max.wait.ms": "60", "dr.producer.send.buffer.bytes": "4194304",
        "primary->dr.producer.override.send.buffer.bytes": "8388608"}), DEFAULTS)
    assert settings.mirrors_topic("capture.vehicle") and not settings.mirrors_topic("capture.face")
    assert not settings.mirrors_topic("xray")
    assert settings.target_topic("alerts") == "primary.alerts"
    assert settings.tasks == 3 and settings.sync_group_offsets
    assert settings.consumer_int("fetch.max.wait.ms", 0) == 60
    assert settings.producer_int("send.buffer.bytes", 0) == 8388608


def test_legacy_flags(tmp_path: Path) -> None:
    consumer = tmp_path / "consumer.properties"
    consumer.write_text("bootstrap.servers=src:9092\nfetch.min.bytes=1024\n")
    producer = tmp_path / "producer.properties"
    producer.write_text("bootstrap.servers=dst:9092\n")
    settings = from_legacy_flags(consumer_config=consumer, producer_config=producer, include="capture.*,alerts",
                                 exclude="capture.face", streams=4, solution_defaults=DEFAULTS)
    assert (settings.source_bootstrap, settings.target_bootstrap, settings.tasks) == ("src:9092", "dst:9092", 4)
    assert settings.mirrors_topic("alerts") and settings.mirrors_topic("capture.vehicle")
    assert not settings.mirrors_topic("capture.face")
    assert settings.consumer_int("fetch.min.bytes", 1) == 1024
    with pytest.raises(SettingsError, match="topics"):
        from_legacy_flags(consumer_config=None, producer_config=None, include="(", exclude=None, streams=1,
                          solution_defaults=DEFAULTS)


def test_the_drill_waits_through_a_not_leader_answer_and_not_through_a_real_error() -> None:
    """librdkafka's watermark query reports NOT_LEADER_FOR_PARTITION as not retriable; on a primary that has just
    started, with topics the mirror has just created, it is transient (a CI failback drill died on it)."""
    from confluent_kafka import KafkaError, KafkaException

    from dr_mirror.drill.load import wait_until

    answers = iter([KafkaException(KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION)), False, True])

    def condition() -> bool:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    wait_until(condition, 5, "caught up")
    with pytest.raises(KafkaException):
        wait_until(lambda: (_ for _ in ()).throw(KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))),
              5, "never")
