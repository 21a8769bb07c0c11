"""kcat (librdkafka 2.0, an older librdkafka than confluent-kafka's) as an operator would use it.

kcat exercises the broker the way people debug it: metadata listings, line-oriented produce with
keys and headers, and format-string consumption. Consumption uses -C with a partition (simple
consumer, no group).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time

import pytest

from bus.protocol import compression
from testkit.clients import create_topic, stored_batches, wait_until

KCAT = shutil.which("kcat") or "/usr/bin/kcat"
FAST = ["-X", "socket.timeout.ms=5000", "-X", "message.timeout.ms=8000", "-X", "reconnect.backoff.max.ms=500",
        "-X", "retry.backoff.ms=50"]

pytestmark = pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed (make system-deps)")


def kcat(broker, *args: str, stdin: str | None = None, timeout: float = 20.0) -> str:  # type: ignore[no-untyped-def]
    result = subprocess.run([KCAT, "-b", broker.bootstrap, *FAST, *args], input=stdin, capture_output=True,
                            text=True, timeout=timeout)
    assert result.returncode == 0, f"kcat {' '.join(args)} exited {result.returncode}: {result.stderr}"
    return result.stdout


def test_metadata_json(shared_broker) -> None:
    """-L -J lists our one broker at its real address and each partition led by it."""
    create_topic(shared_broker.bootstrap, "kcat-meta", partitions=3)
    meta = json.loads(kcat(shared_broker, "-L", "-J", "-t", "kcat-meta"))
    assert meta["brokers"] == [{"id": 1, "name": shared_broker.bootstrap}]
    assert meta["controllerid"] == 1
    [topic] = meta["topics"]
    assert topic["topic"] == "kcat-meta"
    assert "error" not in topic
    assert [(p["partition"], p["leader"], p["replicas"], p["isrs"]) for p in topic["partitions"]] == [
        (i, 1, [{"id": 1}], [{"id": 1}]) for i in range(3)
    ]

    listing = json.loads(kcat(shared_broker, "-L", "-J"))
    assert "kcat-meta" in {t["topic"] for t in listing["topics"]}


def test_metadata_text_listing(shared_broker) -> None:
    create_topic(shared_broker.bootstrap, "kcat-meta-text", partitions=2)
    text = kcat(shared_broker, "-L", "-t", "kcat-meta-text")
    assert f"broker 1 at {shared_broker.bootstrap}" in text
    assert 'topic "kcat-meta-text" with 2 partitions:' in text
    assert "partition 0, leader 1, replicas: 1, isrs: 1" in text
    assert "partition 1, leader 1, replicas: 1, isrs: 1" in text


def test_produce_keys_headers_and_consume_with_format(shared_broker) -> None:
    """-P -K: -H produces keyed records with headers; -C -f prints exactly key/value/offset/partition/headers."""
    topic = "kcat-keys-headers"
    create_topic(shared_broker.bootstrap, topic, partitions=2)
    lines = [f"plate-{i}:浙AWL{i:03d}" for i in range(10)]
    before = int(time.time() * 1000)
    kcat(shared_broker, "-P", "-t", topic, "-p", "1", "-K:", "-H", "source=kcat", "-H", "n=1",
         stdin="\n".join(lines) + "\n")
    after = int(time.time() * 1000)

    out = kcat(shared_broker, "-C", "-t", topic, "-p", "1", "-o", "beginning", "-e", "-f", "%k|%s|%o|%p|%h|%T\n")
    rows = [line.split("|") for line in out.splitlines()]
    assert [r[:5] for r in rows] == [
        [f"plate-{i}", f"浙AWL{i:03d}", str(i), "1", "source=kcat,n=1"] for i in range(10)
    ]
    for row in rows:
        assert before - 1000 <= int(row[5]) <= after + 1000, row
    # Partition 0 got nothing.
    assert kcat(shared_broker, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-f", "%s\n") == ""


def test_consume_offsets_and_counts(shared_broker) -> None:
    """-o N starts at an absolute offset, -o -N from the end, -c stops after a count."""
    topic = "kcat-offsets"
    create_topic(shared_broker.bootstrap, topic)
    kcat(shared_broker, "-P", "-t", topic, "-p", "0", stdin="".join(f"m{i}\n" for i in range(20)))
    fmt = ["-f", "%o:%s\n"]
    assert kcat(shared_broker, "-C", "-t", topic, "-p", "0", "-o", "15", "-e", *fmt) == "".join(
        f"{i}:m{i}\n" for i in range(15, 20))
    assert kcat(shared_broker, "-C", "-t", topic, "-p", "0", "-o", "-3", "-e", *fmt) == "".join(
        f"{i}:m{i}\n" for i in range(17, 20))
    assert kcat(shared_broker, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-c", "4", *fmt) == "".join(
        f"{i}:m{i}\n" for i in range(4))


def test_query_offset_by_timestamp(shared_broker) -> None:
    """-Q -t topic:partition:timestamp uses ListOffsets by time."""
    topic = "kcat-query"
    create_topic(shared_broker.bootstrap, topic)
    kcat(shared_broker, "-P", "-t", topic, "-p", "0", stdin="a\nb\nc\n")
    time.sleep(0.05)
    after = int(time.time() * 1000)
    assert kcat(shared_broker, "-Q", "-t", f"{topic}:0:0").strip() == f"{topic} [0] offset 0"
    assert kcat(shared_broker, "-Q", "-t", f"{topic}:0:{after}").strip() == f"{topic} [0] offset -1"


@pytest.mark.parametrize(("codec", "codec_id"), [
    ("gzip", compression.GZIP),
    ("snappy", compression.SNAPPY),
    ("lz4", compression.LZ4),  # librdkafka turns lz4 off unless FindCoordinator v0 is advertised
    ("zstd", compression.ZSTD),
])
def test_compression_codecs(shared_broker, codec: str, codec_id: int) -> None:
    """-z CODEC: the batch lands compressed with that codec, and kcat reads it back line for line."""
    topic = f"kcat-z-{codec}"
    create_topic(shared_broker.bootstrap, topic)
    lines = [f"{codec} line {i} " + "x" * 100 for i in range(50)]
    kcat(shared_broker, "-P", "-t", topic, "-p", "0", "-z", codec, "-X", "linger.ms=100",
         stdin="\n".join(lines) + "\n")
    out = kcat(shared_broker, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-f", "%s\n")
    assert out.splitlines() == lines
    assert wait_until(lambda: sum(len(b.records) for b in stored_batches(shared_broker.data_dir, topic)) == 50)
    assert {b.info.compression for b in stored_batches(shared_broker.data_dir, topic)} == {codec_id}
