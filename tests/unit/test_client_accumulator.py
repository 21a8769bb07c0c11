"""Record accumulator: batching, readiness (linger, full, flush), memory blocking, splits, expiry.

The batches it builds are checked with the broker's own parser (`scan_batches` verifies layout and
CRC), so a batch this client sends is one the broker accepts.
"""

from __future__ import annotations

import threading
import time

import pytest

from bus.client.accumulator import ABORTED, ProducerBatch, RecordAccumulator, encode_headers
from bus.client.errors import BufferExhaustedError
from bus.client.fetcher import decode_batch
from bus.protocol import compression as codecs
from bus.protocol import records as rb


def accumulator(**overrides: int) -> RecordAccumulator:
    settings = {"batch_size": 1024, "linger_ms": 50, "buffer_memory": 1 << 20, "codec": codecs.NONE,
                "delivery_timeout_ms": 120000, "retry_backoff_ms": 100, **overrides}
    return RecordAccumulator(**settings)


def append(acc: RecordAccumulator, value: bytes, partition: int = 0, key: bytes | None = None,
           timestamp: int = 1000, abort: bool = False) -> object:
    return acc.append("t", partition, timestamp, key, value, b"\x00", None, time.monotonic() + 1, abort)


def leader(_topic: str, _partition: int) -> int:
    return 1


def always(_batch: ProducerBatch) -> bool:
    return True


def drain(acc: RecordAccumulator, max_size: int = 1 << 20) -> list[ProducerBatch]:
    out = acc.drain([1], leader, max_size, always, lambda b: b.build(-1, -1, -1, False), time.monotonic())
    return out.get(1, [])


def test_records_fill_a_batch_then_open_the_next() -> None:
    acc = accumulator(batch_size=1024)
    for _ in range(30):
        append(acc, b"x" * 100)
    deque = acc.batches[("t", 0)]
    assert len(deque) == 4
    assert all(len(b.buf) <= 1024 for b in deque)
    assert sum(b.count for b in deque) == 30


def test_built_batch_parses_with_the_brokers_validator_and_decodes() -> None:
    acc = accumulator()
    append(acc, b"v1", key=b"k1", timestamp=1000)
    append(acc, None, key=b"k2", timestamp=1005)
    acc.append("t", 0, 1010, None, b"v3", encode_headers([("h1", b"z")]), None, time.monotonic() + 1, False)
    [batch] = drain(acc)
    payload = bytes(batch.build(7, 3, 42, False))
    [info] = rb.scan_batches(payload)
    assert (info.producer_id, info.producer_epoch, info.base_sequence, info.records_count) == (7, 3, 42, 3)
    assert info.max_timestamp == 1010
    records = list(rb.iter_records(payload, info))
    assert [(r.offset, r.timestamp, r.key, r.value) for r in records] == [
        (0, 1000, b"k1", b"v1"), (1, 1005, b"k2", None), (2, 1010, None, b"v3")]
    assert records[2].headers == (("h1", b"z"),)
    fast = decode_batch(payload, info, "t", 0, 0, None, None)
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in fast] == [
        (r.offset, r.timestamp, r.key, r.value, r.headers) for r in records]


@pytest.mark.parametrize("codec", [codecs.GZIP, codecs.SNAPPY, codecs.LZ4, codecs.ZSTD])
def test_compressed_batches_compress_once_and_round_trip(codec: int) -> None:
    acc = accumulator(codec=codec, batch_size=16384)
    for i in range(100):
        append(acc, b"value-%d" % i + b"x" * 90)
    [batch] = drain(acc)
    payload = bytes(batch.build(-1, -1, -1, False))
    [info] = rb.scan_batches(payload)
    assert info.compression == codec
    assert len(payload) < 100 * 100 / 2
    assert [r.value for r in decode_batch(payload, info, "t", 0, 0, None, None)] == [
        b"value-%d" % i + b"x" * 90 for i in range(100)]


def test_rebuilding_with_a_new_producer_state_keeps_the_records() -> None:
    acc = accumulator(codec=codecs.LZ4)
    append(acc, b"a")
    [batch] = drain(acc)
    first = bytes(batch.build(1, 0, 0, False))
    second = bytes(batch.build(2, 0, 5, False))
    assert rb.scan_batches(second)[0].producer_id == 2
    assert first[rb.BATCH_OVERHEAD:] == second[rb.BATCH_OVERHEAD:]


def test_linger_makes_a_partial_batch_ready_later() -> None:
    acc = accumulator(linger_ms=50)
    append(acc, b"x")
    ready, next_check, _ = acc.ready(time.monotonic(), leader, always)
    assert not ready and 0 < next_check <= 0.05
    ready, _, _ = acc.ready(time.monotonic() + 0.06, leader, always)
    assert ready == {1}


def test_full_batches_and_flush_are_ready_at_once() -> None:
    acc = accumulator(linger_ms=10_000, batch_size=256)
    append(acc, b"x", partition=0)
    assert acc.ready(time.monotonic(), leader, always)[0] == set()
    for _ in range(5):
        append(acc, b"y" * 100, partition=0)
    assert acc.ready(time.monotonic(), leader, always)[0] == {1}
    acc2 = accumulator(linger_ms=10_000)
    append(acc2, b"x")
    acc2.flushes += 1
    assert acc2.ready(time.monotonic(), leader, always)[0] == {1}


def test_unknown_leader_is_reported() -> None:
    acc = accumulator(linger_ms=0)
    append(acc, b"x")
    ready, _, unknown = acc.ready(time.monotonic(), lambda t, p: -1, always)
    assert not ready and unknown == {"t"}


def test_drain_respects_max_request_size_but_always_sends_one() -> None:
    acc = accumulator(batch_size=300)
    for partition in range(4):
        for _ in range(2):
            append(acc, b"z" * 100, partition=partition)
    first = drain(acc, max_size=700)
    assert 1 <= len(first) <= 3 and len({b.partition for b in first}) == len(first)
    tiny = drain(acc, max_size=10)
    assert len(tiny) == 1


def test_abort_on_new_batch_reports_instead_of_opening_one() -> None:
    acc = accumulator(batch_size=256)
    assert append(acc, b"a" * 100, abort=True) is ABORTED  # no batch yet
    append(acc, b"a" * 100)
    assert append(acc, b"b" * 10, abort=True) is not ABORTED
    assert append(acc, b"c" * 200, abort=True) is ABORTED


def test_buffer_memory_blocks_then_times_out() -> None:
    acc = accumulator(batch_size=1024, buffer_memory=2048)
    append(acc, b"x" * 900, partition=0)
    append(acc, b"x" * 900, partition=1)
    started = time.monotonic()
    with pytest.raises(BufferExhaustedError):
        acc.append("t", 2, 0, None, b"x", b"\x00", None, time.monotonic() + 0.2, False)
    assert 0.18 <= time.monotonic() - started < 2


def test_buffer_memory_unblocks_when_a_batch_completes() -> None:
    acc = accumulator(batch_size=1024, buffer_memory=2048)
    append(acc, b"x" * 900, partition=0)
    append(acc, b"x" * 900, partition=1)
    [batch, *_] = drain(acc)

    def complete() -> None:
        time.sleep(0.1)
        batch.complete(0, -1, None, lambda e: None)
        acc.finished(batch)

    threading.Thread(target=complete).start()
    future = acc.append("t", 2, 0, None, b"x", b"\x00", None, time.monotonic() + 5, False)
    assert future is not None and acc.available == 0


def test_split_halves_keep_order_sequences_and_futures() -> None:
    acc = accumulator(batch_size=1 << 16)
    futures = [append(acc, b"%03d" % i) for i in range(10)]
    [batch] = drain(acc)
    batch.build(9, 0, 100, False)
    halves = acc.split_and_reenqueue(batch, time.monotonic())
    assert [h.count for h in halves] == [5, 5]
    assert [h.base_sequence for h in halves] == [100, 105]
    queued = list(acc.batches[("t", 0)])
    assert queued == halves
    for half in halves:
        half.complete(500 if half is halves[0] else 505, -1, None, lambda e: None)
    assert [f.get(1).offset for f in futures] == list(range(500, 510))  # type: ignore[attr-defined]


def test_callbacks_run_exactly_once_with_metadata() -> None:
    acc = accumulator()
    calls: list[tuple[int | None, object]] = []
    futures = [acc.append("t", 0, 5, None, b"v", b"\x00", lambda md, e: calls.append((md.offset, e)),
                          time.monotonic() + 1, False) for _ in range(3)]
    [batch] = drain(acc)
    assert batch.complete(10, -1, None, lambda e: None)
    assert not batch.complete(99, -1, RuntimeError("again"), lambda e: None)
    assert calls == [(10, None), (11, None), (12, None)]
    assert futures[2].get(0).offset == 12  # type: ignore[attr-defined]


def test_expired_batches_leave_the_queue() -> None:
    acc = accumulator(delivery_timeout_ms=100)
    append(acc, b"x", partition=0)
    assert acc.expired(time.monotonic()) == []
    expired = acc.expired(time.monotonic() + 0.2)
    assert len(expired) == 1 and not acc.batches[("t", 0)]


def test_retries_go_back_in_sequence_order() -> None:
    acc = accumulator(batch_size=128)
    for _ in range(3):
        append(acc, b"x" * 100)
    batches = [drain(acc)[0] for _ in range(3)]
    for sequence, batch in enumerate(batches):
        batch.build(1, 0, sequence, False)
    append(acc, b"new")  # a fresh batch with no sequence yet
    for batch in (batches[2], batches[0], batches[1]):
        acc.reenqueue(batch, time.monotonic())
    assert [b.base_sequence for b in acc.batches[("t", 0)]] == [0, 1, 2, -1]
