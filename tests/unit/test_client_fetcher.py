"""Fetched-batch handling without a broker: lazy decoding, positions, read_committed filtering."""

from __future__ import annotations

import heapq

from bus.client.fetcher import CompletedFetch, decode_batch
from bus.client.subscription import TopicPartition
from bus.protocol import compression as codecs
from bus.protocol import records as rb

TP = TopicPartition("t", 0)


def data_batch(base: int, values: list[bytes], producer_id: int = -1, transactional: bool = False,
               codec: int = codecs.NONE) -> bytes:
    return rb.build_batch([(base + i, 1000 + i, None, v) for i, v in enumerate(values)], base_offset=base,
                          producer_id=producer_id, producer_epoch=0 if producer_id >= 0 else -1,
                          base_sequence=0 if producer_id >= 0 else -1, is_transactional=transactional,
                          compression=codec)


def marker(offset: int, producer_id: int, commit: bool) -> bytes:
    key = b"\x00\x00\x00" + (b"\x01" if commit else b"\x00")
    return rb.build_batch([(offset, 2000, key, b"\x00\x00\x00\x00\x00\x00")], base_offset=offset,
                          producer_id=producer_id, producer_epoch=0, is_transactional=True, is_control=True)


def completed(data: bytes, fetch_offset: int = 0, aborted: list[tuple[int, int]] | None = None,
              read_committed: bool = False) -> CompletedFetch:
    batches, _ = rb.scan_batches_prefix(data)
    heap = list(aborted or [])
    heapq.heapify(heap)
    return CompletedFetch(TP, fetch_offset, data, batches, heap, read_committed)


def test_take_is_bounded_and_resumes_where_it_stopped() -> None:
    data = data_batch(0, [b"a", b"b", b"c"]) + data_batch(3, [b"d", b"e"], codec=codecs.LZ4)
    fetch = completed(data)
    first = fetch.take(2, None, None)
    assert [r.value for r in first] == [b"a", b"b"] and fetch.position_after == 2
    rest = fetch.take(10, None, None)
    assert [(r.offset, r.value) for r in rest] == [(2, b"c"), (3, b"d"), (4, b"e")]
    assert fetch.exhausted and fetch.position_after == 5


def test_a_fetch_from_the_middle_of_a_batch_skips_earlier_records() -> None:
    fetch = completed(data_batch(10, [b"a", b"b", b"c", b"d"]), fetch_offset=12)
    assert [r.offset for r in fetch.take(10, None, None)] == [12, 13]


def test_read_committed_drops_aborted_transactions_and_all_control_batches() -> None:
    data = (data_batch(0, [b"p1", b"p2"], producer_id=7, transactional=True)
            + data_batch(2, [b"plain"])
            + data_batch(3, [b"q1"], producer_id=8, transactional=True)
            + marker(4, 7, commit=False)
            + marker(5, 8, commit=True)
            + data_batch(6, [b"p-again"], producer_id=7, transactional=True)
            + marker(7, 7, commit=True))
    committed = completed(data, aborted=[(0, 7)], read_committed=True)
    assert [r.value for r in committed.take(100, None, None)] == [b"plain", b"q1", b"p-again"]
    assert committed.position_after == 8  # past the markers
    uncommitted = completed(data, aborted=[(0, 7)], read_committed=False)
    assert [r.value for r in uncommitted.take(100, None, None)] == [b"p1", b"p2", b"plain", b"q1", b"p-again"]


def test_deserializers_and_sizes() -> None:
    batch_bytes = rb.build_batch([(0, 5, b"k", b"12"), (1, 6, None, None)], base_offset=0)
    [info] = rb.scan_batches(batch_bytes)
    records = decode_batch(batch_bytes, info, "t", 0, 0, lambda t, k: k and k.decode(),
                           lambda t, v: None if v is None else int(v))
    assert [(r.key, r.value, r.serialized_key_size, r.serialized_value_size) for r in records] == [
        ("k", 12, 1, 2), (None, None, -1, -1)]


def test_log_append_time_replaces_record_timestamps() -> None:
    batch_bytes = bytearray(data_batch(0, [b"a", b"b"]))
    [info] = rb.scan_batches(batch_bytes)
    rb.assign_offsets(batch_bytes, [info], 0, log_append_time=99_000)
    [info] = rb.scan_batches(batch_bytes)
    assert {r.timestamp for r in decode_batch(bytes(batch_bytes), info, "t", 0, 0, None, None)} == {99_000}
