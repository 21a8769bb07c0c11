"""Clients no good Kafka client would be, for the broker-limits tests and benchmarks/broker_requests.py.

Each one attacks a different bound: a connection that pipelines fetches and never reads (write-side
backpressure), thousands of idle connections, a zstd batch that inflates to gigabytes (bounded
decompression), a flood of tiny requests (the request queue), and a consumer that reads its responses
a trickle at a time. `LatencyProbe` is the well-behaved client whose latency they must not ruin.
"""

from __future__ import annotations

import contextlib
import datetime
import socket
import struct
import threading
import time
from typing import Any

from bus.protocol import compression
from bus.protocol import records as rb
from testkit.raw_kafka import RawKafka, api_versions_request, produce_request


def fetch_request(topic: str, partition: int = 0, offset: int = 0, max_bytes: int = 1 << 20) -> Any:
    from kio.schema.fetch.v11.request import FetchPartition, FetchRequest, FetchTopic

    return FetchRequest(
        replica_id=-1, max_wait=datetime.timedelta(milliseconds=0), min_bytes=1, max_bytes=max_bytes,
        isolation_level=0, session_id=0, session_epoch=-1,
        topics=(FetchTopic(topic=topic, partitions=(FetchPartition(
            partition=partition, current_leader_epoch=-1, fetch_offset=offset, log_start_offset=-1,
            partition_max_bytes=max_bytes),)),),
        forgotten_topics_data=(), rack_id="",
    )


def framed(raw: RawKafka, request: Any) -> bytes:
    payload = raw.encode(request)
    return struct.pack(">i", len(payload)) + payload


def fill_topic(bootstrap: str, topic: str, megabytes: int) -> None:
    """`megabytes` of incompressible 64 KiB records in partition 0, for fetches with big responses."""
    import os

    with RawKafka(bootstrap, timeout=30) as raw:
        for i in range(megabytes * 16):
            batch = rb.build_batch([(0, int(time.time() * 1000), None, os.urandom(64 << 10))], base_offset=0)
            response = raw.request(produce_request(topic, 0, batch, acks=1))
            code = response.responses[0].partition_responses[0].error_code.value
            assert code == 0, f"fill produce {i} failed with {code}"


class FetchPipeliner:
    """Sends `count` fetches (each for up to 1 MiB) on one connection and never reads a byte."""

    def __init__(self, bootstrap: str, topic: str, count: int = 1000) -> None:
        self.raw = RawKafka(bootstrap, timeout=30)
        self.raw.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
        frames = b"".join(framed(self.raw, fetch_request(topic)) for _ in range(count))
        self.thread = threading.Thread(target=self._send, args=(frames,), daemon=True)
        self.thread.start()

    def _send(self, frames: bytes) -> None:
        with contextlib.suppress(OSError):
            self.raw.sock.sendall(frames)  # blocks once the broker stops reading: that is the point

    def close(self) -> None:
        self.raw.sock.close()


class IdleConnections:
    """`count` connections that connect and then say nothing."""

    def __init__(self, bootstrap: str, count: int = 2000) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.socks = []
        for _ in range(count):
            self.socks.append(socket.create_connection((host, int(port)), timeout=10))

    def alive(self) -> int:
        """Connections the broker has not closed."""
        alive = 0
        for sock in self.socks:
            sock.setblocking(False)
            try:
                alive += sock.recv(1) != b""
            except BlockingIOError:
                alive += 1
            except OSError:
                pass
        return alive

    def close(self) -> None:
        for sock in self.socks:
            sock.close()


def zstd_bomb_batch(inflated_gib: int = 30) -> bytes:
    """One record batch of about 1 MB whose zstd records section inflates to about `inflated_gib` GiB."""
    frame = compression.compress(compression.ZSTD, bytes(64 << 20))  # ~2 KB each
    frames = frame * (inflated_gib * 16)
    batch = bytearray(rb.build_batch([(0, int(time.time() * 1000), b"k", b"v")], base_offset=0,
                                     compression=compression.ZSTD))
    header = bytes(batch[: rb.BATCH_OVERHEAD])
    out = bytearray(header) + frames
    struct.pack_into(">i", out, 8, len(out) - rb.LOG_OVERHEAD)
    import crc32c

    struct.pack_into(">I", out, rb.CRC_OFFSET, crc32c.crc32c(memoryview(out)[rb.ATTRIBUTES_OFFSET:]))
    return bytes(out)


class TinyFlood:
    """`connections` connections each sending ApiVersions requests as fast as they can, reading lazily.

    Runs in its own process, so its threads do not take the GIL from the client measuring latency.
    """

    def __init__(self, bootstrap: str, connections: int = 4, seconds: float = 5.0) -> None:
        import multiprocessing

        context = multiprocessing.get_context("spawn")
        self._sent = context.Value("q", 0)
        self.proc = context.Process(target=_flood, args=(bootstrap, connections, seconds, self._sent), daemon=True)
        self.proc.start()

    @property
    def sent(self) -> int:
        return int(self._sent.value)

    def join(self) -> None:
        self.proc.join(60)


def _flood(bootstrap: str, connections: int, seconds: float, sent: Any) -> None:
    stop_at = time.monotonic() + seconds
    threads = [threading.Thread(target=_flood_one, args=(bootstrap, stop_at, sent)) for _ in range(connections)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _flood_one(bootstrap: str, stop_at: float, sent: Any) -> None:
    with RawKafka(bootstrap, timeout=30) as raw:
        chunk = b"".join(framed(raw, api_versions_request()) for _ in range(500))
        reader = threading.Thread(target=_drain_lazily, args=(raw.sock,), daemon=True)
        reader.start()
        try:
            while time.monotonic() < stop_at:
                raw.sock.sendall(chunk)
                with sent.get_lock():
                    sent.value += 500
        except OSError:
            pass


def _drain_lazily(sock: socket.socket) -> None:
    try:
        while sock.recv(1 << 16):
            time.sleep(0.01)  # read lazily: responses pile up on the broker's side
    except OSError:
        pass


class SlowConsumer:
    """Fetches 1 MiB responses back to back and reads them at about `rate` bytes a second."""

    def __init__(self, bootstrap: str, topic: str, rate: int = 64 << 10) -> None:
        self.raw = RawKafka(bootstrap, timeout=60)
        self.raw.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 << 10)
        self.rate = rate
        self.read = 0
        self.running = True
        self.frames = b"".join(framed(self.raw, fetch_request(topic)) for _ in range(50))
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.raw.sock.sendall(self.frames)
            while self.running:
                data = self.raw.sock.recv(4096)
                if not data:
                    return
                self.read += len(data)
                time.sleep(len(data) / self.rate)
        except OSError:
            pass

    def close(self) -> None:
        self.running = False
        self.raw.sock.close()


class LatencyProbe:
    """A well-behaved client: one produce round trip (acks=1, one small record) every `interval` seconds."""

    def __init__(self, bootstrap: str, topic: str, interval: float = 0.02) -> None:
        self.raw = RawKafka(bootstrap, timeout=10)
        self.topic = topic
        self.interval = interval
        self.latencies: list[float] = []
        self.errors: list[str] = []
        self.running = True
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while self.running:
            batch = rb.build_batch([(0, int(time.time() * 1000), b"k", b"probe")], base_offset=0)
            started = time.perf_counter()
            try:
                response = self.raw.request(produce_request(self.topic, 0, batch, acks=1))
            except OSError as exc:
                self.errors.append(repr(exc))
                return
            self.latencies.append(time.perf_counter() - started)
            code = response.responses[0].partition_responses[0].error_code.value
            if code:
                self.errors.append(f"error code {code}")
            time.sleep(self.interval)

    def stop(self) -> dict[str, float]:
        self.running = False
        self.thread.join(15)
        self.raw.close()
        ordered = sorted(self.latencies)
        if not ordered:
            return {"count": 0, "p50": float("inf"), "p99": float("inf"), "max": float("inf")}
        return {"count": len(ordered), "p50": ordered[len(ordered) // 2],
                "p99": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], "max": ordered[-1]}
