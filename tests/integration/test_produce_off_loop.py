"""A large compressed batch whose records the broker must decode is prepared off the event loop.

(That appends to a partition keep request order meanwhile: tests/unit/test_produce_order.py.)"""

from __future__ import annotations

import time

from bus.broker.partition import OFF_LOOP_PREPARE_BYTES
from bus.protocol import compression
from bus.protocol import records as rb
from testkit.clients import consume, create_topic
from testkit.hostile import LatencyProbe
from testkit.raw_kafka import RawKafka, produce_error


def _keyed_batch(count: int, prefix: bytes) -> bytes:
    now = int(time.time() * 1000)
    return rb.build_batch([(i, now, prefix + b"-%d" % i, b"v%d" % i) for i in range(count)], base_offset=0,
                          compression=compression.ZSTD)


def test_large_batch_to_a_compacted_topic_does_not_stall_other_clients(make_broker) -> None:
    """Checking every record for a key decodes the whole batch; on the loop that took every other client's
    requests hostage for as long (seconds for a few hundred thousand records)."""
    broker = make_broker()
    create_topic(broker.bootstrap, "compacted",
                 config={"cleanup.policy": "compact", "max.message.bytes": str(16 << 20)})
    create_topic(broker.bootstrap, "probe")
    big = _keyed_batch(300_000, b"big")
    assert len(big) > OFF_LOOP_PREPARE_BYTES
    probe = LatencyProbe(broker.bootstrap, "probe", interval=0.005)
    try:
        time.sleep(0.3)
        with RawKafka(broker.bootstrap, timeout=120) as raw:
            started = time.perf_counter()
            code, base_offset = produce_error(raw, "compacted", 0, big)
            took = time.perf_counter() - started
    finally:
        figures = probe.stop()
    assert (code, base_offset) == (0, 0)
    assert took > 0.5, f"the batch took {took:.2f}s: too little work to show a stall"
    assert figures["count"] > 10 and figures["max"] < took / 3, (figures, took)
    assert len(consume(broker.bootstrap, "compacted", count=300_000, timeout=60)) == 300_000
