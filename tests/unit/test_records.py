"""Record batches: encoding, header validation, offset assignment, and robustness against bad bytes."""

from __future__ import annotations

import contextlib
import struct

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from bus.protocol import compression
from bus.protocol import records as rb

TS = 1_700_000_000_000
DECLARED = (rb.CorruptRecordError, rb.RecordTooLargeError, rb.UnsupportedMagicError, rb.UnsupportedCompressionError)


def sample_records(base: int = 0, count: int = 20) -> list[rb.Record]:
    return [
        rb.Record(
            offset=base + i,
            timestamp=TS + 7 * i,
            key=None if i % 4 == 0 else f"key-{i}".encode(),
            value=None if i % 5 == 3 else b"v" * i,
            headers=(("trace", b"abc"), ("empty", None)) if i % 3 == 0 else (),
        )
        for i in range(count)
    ]


def decode(buf: bytes) -> list[rb.Record]:
    return [record for batch in rb.scan_batches(buf) for record in rb.iter_records(buf, batch)]


def refresh_crc(buf: bytearray, pos: int = 0) -> None:
    size = 12 + struct.unpack_from(">i", buf, pos + 8)[0]
    struct.pack_into(">I", buf, pos + rb.CRC_OFFSET, crc32c.crc32c(bytes(buf[pos + rb.ATTRIBUTES_OFFSET : pos + size])))


# ----------------------------------------------------------------------------------------------- encoding


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_build_and_iterate_round_trip_every_codec(codec: int) -> None:
    records = sample_records(base=100)
    buf = rb.build_batch(records, base_offset=100, compression=codec, producer_id=7, producer_epoch=2,
                         base_sequence=40, is_transactional=True, partition_leader_epoch=5)  # fmt: skip
    [batch] = rb.scan_batches(buf)
    assert (batch.compression, batch.base_offset, batch.last_offset, batch.records_count) == (codec, 100, 119, 20)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (7, 2, 40)
    assert batch.is_transactional and not batch.is_control and batch.partition_leader_epoch == 5
    assert (batch.base_timestamp, batch.max_timestamp) == (TS, TS + 7 * 19)
    assert list(rb.iter_records(buf, batch)) == records


def test_tuples_are_record_fields() -> None:
    buf = rb.build_batch([(0, TS, b"k", b"v"), (1, TS + 1, None, None, (("h", b"x"),))], base_offset=0)
    assert decode(buf) == [rb.Record(0, TS, b"k", b"v"), rb.Record(1, TS + 1, None, None, (("h", b"x"),))]


@pytest.mark.parametrize("codec", [0, 1])
def test_bytes_match_kafka_python_both_ways(codec: int) -> None:
    """An independent implementation decodes what we encode, and we decode what it encodes."""
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=0, producer_id=3,
                                        producer_epoch=1, base_sequence=0, batch_size=1 << 20)  # fmt: skip
    for i in range(30):
        builder.append(i, timestamp=TS + i, key=b"k%d" % i if i % 2 else None, value=b"v" * i, headers=[("h", b"1")])
    theirs = bytes(builder.build())
    ours_decoded = decode(theirs)
    assert [(r.offset, r.key, r.value, r.headers) for r in ours_decoded][:2] == [
        (0, None, b"", (("h", b"1"),)),
        (1, b"k1", b"v", (("h", b"1"),)),
    ]
    ours = rb.build_batch(ours_decoded, base_offset=0, compression=codec, producer_id=3, producer_epoch=1,
                          base_sequence=0, partition_leader_epoch=0)  # fmt: skip
    if codec == 0:
        assert ours == theirs
    batch = DefaultRecordBatch(ours)
    assert batch.validate_crc()
    assert [(r.offset, r.timestamp, r.key, r.value) for r in batch] == [
        (r.offset, r.timestamp, r.key, r.value) for r in ours_decoded
    ]


def test_varints_at_the_edges() -> None:
    records = [rb.Record(0, -(2**40), b"", b"\x00" * 300), rb.Record(2**31 - 1, 2**40, b"k" * 70000, b"")]
    buf = rb.build_batch(records, base_offset=0, delete_horizon_ms=0)
    [batch], _ = rb.scan_batches_prefix(buf)  # a sparse (compacted) batch
    assert list(rb.iter_records(buf, batch)) == records


def test_delete_horizon_replaces_the_base_timestamp_but_keeps_record_times() -> None:
    records = sample_records(count=3)
    buf = rb.build_batch(records, base_offset=0, delete_horizon_ms=TS + 86_400_000)
    [batch] = rb.scan_batches(buf)
    assert batch.delete_horizon_ms == TS + 86_400_000 == batch.base_timestamp
    assert list(rb.iter_records(buf, batch)) == records
    [plain] = rb.scan_batches(rb.build_batch(records, base_offset=0))
    assert plain.delete_horizon_ms is None


def test_empty_batch_keeps_its_offset_span_and_timestamp() -> None:
    """What the cleaner writes when every record of a producer's last batch was removed."""
    buf = rb.build_batch([], base_offset=50, last_offset_delta=9, max_timestamp=TS, producer_id=4)
    [batch] = rb.scan_batches_prefix(buf)[0]
    assert (batch.records_count, batch.last_offset, batch.base_timestamp, batch.max_timestamp) == (0, 59, TS, TS)
    with pytest.raises(rb.CorruptRecordError, match="recordsCount"):
        rb.scan_batches(buf)  # a client may not send such a batch
    assert list(rb.iter_records(buf, batch)) == []


def test_log_append_time_batches_report_the_append_time_for_every_record() -> None:
    records = sample_records(count=4)
    buf = rb.build_batch(records, base_offset=0, timestamp_type=rb.LOG_APPEND_TIME, max_timestamp=TS + 999)
    [batch] = rb.scan_batches(buf)
    assert batch.timestamp_type == rb.LOG_APPEND_TIME
    assert {r.timestamp for r in rb.iter_records(buf, batch)} == {TS + 999}


def test_record_offset_outside_the_batch_is_refused() -> None:
    with pytest.raises(ValueError, match="outside"):
        rb.build_batch([(5, TS, None, b"x")], base_offset=6)


# --------------------------------------------------------------------------------------------- validation


def three_batches() -> bytes:
    return b"".join(
        rb.build_batch(sample_records(count=n), base_offset=0, compression=codec)
        for n, codec in ((3, 0), (10, compression.LZ4), (1, compression.ZSTD))
    )


def test_scan_finds_every_batch_with_its_position() -> None:
    buf = three_batches()
    batches = rb.scan_batches(buf)
    assert [b.records_count for b in batches] == [3, 10, 1]
    assert batches[0].position == 0
    assert [b.position for b in batches[1:]] == [batches[0].size, batches[0].size + batches[1].size]
    assert sum(b.size for b in batches) == len(buf)
    assert rb.scan_batches(memoryview(bytearray(buf))) == batches
    assert rb.scan_batches(b"") == []


def test_crc_mismatch() -> None:
    buf = bytearray(three_batches())
    buf[-1] ^= 0x01
    with pytest.raises(rb.CorruptRecordError, match="CRC"):
        rb.scan_batches(buf)
    assert len(rb.scan_batches(buf, verify_crc=False)) == 3


@pytest.mark.parametrize("cut", [1, 11, 12, 16, 17, 60, 61, 100])
def test_truncated_batch(cut: int) -> None:
    first = rb.build_batch(sample_records(), base_offset=0)
    with pytest.raises(rb.CorruptRecordError, match=r"truncated|length"):
        rb.scan_batches(first + first[:cut])


def test_prefix_scan_stops_at_a_torn_or_corrupt_batch() -> None:
    buf = three_batches()
    batches = rb.scan_batches(buf)
    torn = buf + buf[:40]
    assert rb.scan_batches_prefix(torn) == (batches, len(buf))
    corrupt = bytearray(buf)
    corrupt[batches[2].position + 70] ^= 0xFF
    assert rb.scan_batches_prefix(corrupt) == (batches[:2], batches[2].position)


@pytest.mark.parametrize(
    ("magic", "error"),
    [
        (0, rb.UnsupportedMagicError),
        (1, rb.UnsupportedMagicError),
        (3, rb.CorruptRecordError),
        (255, rb.CorruptRecordError),
    ],
)
def test_magic_other_than_2(magic: int, error: type[Exception]) -> None:
    buf = bytearray(rb.build_batch(sample_records(), base_offset=0))
    buf[rb.MAGIC_OFFSET] = magic
    with pytest.raises(error):
        rb.scan_batches(buf)


def test_batch_larger_than_the_limit() -> None:
    buf = rb.build_batch(sample_records(), base_offset=0)
    assert rb.scan_batches(buf, max_batch_bytes=len(buf))
    with pytest.raises(rb.RecordTooLargeError):
        rb.scan_batches(buf, max_batch_bytes=len(buf) - 1)


def test_unknown_compression_id() -> None:
    buf = bytearray(rb.build_batch(sample_records(), base_offset=0))
    struct.pack_into(">h", buf, rb.ATTRIBUTES_OFFSET, 5)
    refresh_crc(buf)
    with pytest.raises(rb.UnsupportedCompressionError):
        rb.scan_batches(buf)


@pytest.mark.parametrize(("count", "last_delta"), [(19, 19), (21, 19), (-1, 19), (0, -1)])
def test_record_count_must_match_the_offset_span(count: int, last_delta: int) -> None:
    """Kafka's LogValidator: recordsCount == lastOffsetDelta + 1 for anything a client sends."""
    buf = bytearray(rb.build_batch(sample_records(), base_offset=0))
    struct.pack_into(">i", buf, 57, count)
    struct.pack_into(">i", buf, 23, last_delta)
    refresh_crc(buf)
    with pytest.raises(rb.CorruptRecordError):
        rb.scan_batches(buf)


def test_corrupt_records_inside_a_valid_header() -> None:
    buf = bytearray(rb.build_batch(sample_records(), base_offset=0))
    del buf[-5:]
    struct.pack_into(">i", buf, 8, len(buf) - 12)
    refresh_crc(buf)
    [batch] = rb.scan_batches(buf)
    with pytest.raises(rb.CorruptRecordError):
        list(rb.iter_records(buf, batch))


def test_undecompressable_body_is_corrupt() -> None:
    buf = bytearray(rb.build_batch(sample_records(), base_offset=0, compression=compression.GZIP))
    buf[70:80] = b"\xff" * 10
    refresh_crc(buf)
    [batch] = rb.scan_batches(buf)
    with pytest.raises(rb.CorruptRecordError):
        list(rb.iter_records(buf, batch))


# --------------------------------------------------------------------------------------- offset assignment


def test_assign_offsets_rewrites_base_offsets_without_touching_the_crc() -> None:
    original = three_batches()
    buf = bytearray(original)
    batches = rb.scan_batches(buf)
    assert rb.assign_offsets(buf, batches, 1000) == 1014
    again = rb.scan_batches(buf)  # CRCs still verify
    assert [b.base_offset for b in again] == [1000, 1003, 1013]
    assert [r.offset for r in decode(bytes(buf))] == list(range(1000, 1014))
    assert [struct.unpack_from(">I", buf, b.position + rb.CRC_OFFSET) for b in again] == [
        struct.unpack_from(">I", original, b.position + rb.CRC_OFFSET) for b in batches
    ]


def test_assign_offsets_with_log_append_time_and_leader_epoch() -> None:
    buf = bytearray(three_batches())
    batches = rb.scan_batches(buf)
    rb.assign_offsets(buf, batches, 0, log_append_time=TS + 5, partition_leader_epoch=9)
    again = rb.scan_batches(buf)  # recomputed CRCs verify
    assert all(b.timestamp_type == rb.LOG_APPEND_TIME and b.max_timestamp == TS + 5 for b in again)
    assert all(b.partition_leader_epoch == 9 for b in again)
    assert [b.compression for b in again] == [b.compression for b in batches]
    assert {r.timestamp for r in decode(bytes(buf))} == {TS + 5}


# ---------------------------------------------------------------------------------------------- properties

VALID = three_batches()


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    buf = bytearray(VALID)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "set", "cut", "insert", "delete"]))
        pos = draw(st.integers(0, max(len(buf) - 1, 0)))
        if kind == "flip" and buf:
            buf[pos] ^= 1 << draw(st.integers(0, 7))
        elif kind == "set" and buf:
            buf[pos] = draw(st.integers(0, 255))
        elif kind == "cut":
            del buf[pos:]
        elif kind == "insert":
            buf[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        else:
            del buf[pos : pos + draw(st.integers(1, 8))]
    return bytes(buf)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated(), st.booleans())
def test_mutations_only_raise_declared_errors(buf: bytes, verify_crc: bool) -> None:
    try:
        batches = rb.scan_batches(buf, verify_crc=verify_crc, max_batch_bytes=len(VALID))
    except DECLARED:
        return
    for batch in batches:
        with contextlib.suppress(rb.CorruptRecordError):
            list(rb.iter_records(buf, batch))


@settings(max_examples=200, deadline=None)
@given(mutated())
def test_prefix_scan_never_raises_and_agrees_with_the_strict_scan(buf: bytes) -> None:
    batches, valid = rb.scan_batches_prefix(buf)
    assert valid == sum(b.size for b in batches) <= len(buf)
    if valid == len(buf):
        assert [b.position for b in rb.scan_batches(buf)] == [b.position for b in batches]


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_only_raise_declared_errors(buf: bytes) -> None:
    with contextlib.suppress(*DECLARED):
        rb.scan_batches(buf, verify_crc=False)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.one_of(st.none(), st.binary(max_size=20)),
            st.one_of(st.none(), st.binary(max_size=50)),
            st.integers(-(2**45), 2**45),
        ),
        min_size=1,
        max_size=20,
    ),
    st.sampled_from([0, 1, 2, 3, 4]),
)
def test_round_trip_property(fields: list[tuple[bytes | None, bytes | None, int]], codec: int) -> None:
    records = [rb.Record(i, ts, key, value) for i, (key, value, ts) in enumerate(fields)]
    assert decode(rb.build_batch(records, base_offset=0, compression=codec)) == records


def test_the_hot_paths_batch_info_is_the_dataclass_its_constructor_makes() -> None:
    """`scan_batches` builds each BatchInfo through its slots (half the time of the frozen dataclass's __init__):
    field for field the same object, equal to and hashed like the constructor's, and as frozen."""
    import dataclasses

    from bus.protocol.records import BatchInfo, _new_batch_info

    values = (7, 120, 1000, 4, 3, 0x10, 1_700_000_000_000, 1_700_000_000_500, 42, 1, 9, 5)
    built, made = _new_batch_info(*values), BatchInfo(*values)
    assert dataclasses.astuple(built) == dataclasses.astuple(made) == values
    assert built == made and hash(built) == hash(made)
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.size = 1  # type: ignore[misc]
