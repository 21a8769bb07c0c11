"""What the broker does with input no good client sends, over raw sockets against a real process.

Each case asserts the protocol's exact answer (an error code, or a closed connection where Kafka
closes it) and then that the broker still serves a real client (confluent-kafka produce + consume),
because a broker one bad peer can wedge or kill is not a broker. The last tests cover start-up with a
bad configuration: a fast, non-zero exit that says what is wrong.
"""

from __future__ import annotations

import random
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.serial import entity_reader

from bus.protocol import records as rb
from contracts.ports import free_port
from contracts.processes import ROOT
from testkit.clients import consume, create_topic, producer_config
from testkit.raw_kafka import (
    RawKafka,
    api_versions_request,
    header_only,
    metadata_request,
    produce_error,
    produce_request,
)

UNSUPPORTED_VERSION = 35
CORRUPT_MESSAGE = 2
MESSAGE_TOO_LARGE = 10
UNKNOWN_TOPIC_OR_PARTITION = 3
RECORD_LIST_TOO_LARGE = 18
NOT_ENOUGH_REPLICAS = 19
INVALID_REQUIRED_ACKS = 21


def assert_still_serves(broker, tag: str, check_logs: bool = True) -> None:  # type: ignore[no-untyped-def]
    """The broker process is alive, logged no crash, and a real client can produce and consume."""
    assert broker.proc.poll() is None, f"broker exited:\n{broker.logs()[-3000:]}"
    topic = f"healthy-{tag}"
    create_topic(broker.bootstrap, topic)
    producer = Producer(producer_config(broker.bootstrap))
    for i in range(3):
        producer.produce(topic, partition=0, value=f"ok-{i}".encode())
    assert producer.flush(10) == 0
    assert [(m.offset(), m.value()) for m in consume(broker.bootstrap, topic, count=3)] == [
        (i, f"ok-{i}".encode()) for i in range(3)
    ]
    if check_logs:
        logs = broker.logs()
        assert "Traceback" not in logs and "internal error" not in logs, logs[-3000:]


def _batch(values: list[bytes], base_ts: int = 1_700_000_000_000) -> bytes:
    return rb.build_batch([(i, base_ts + i, None, v) for i, v in enumerate(values)], base_offset=0)


# -- framing ------------------------------------------------------------------------------------


def test_garbage_bytes_close_the_connection(shared_broker) -> None:
    """An HTTP request is not a Kafka frame (its 'size' is ~1.2 GB): closed at once, nothing allocated."""
    with RawKafka(shared_broker.bootstrap) as raw:
        raw.send_raw(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
        assert raw.is_closed_by_peer()
    assert_still_serves(shared_broker, "garbage")


def test_negative_frame_size_closes_the_connection(shared_broker) -> None:
    with RawKafka(shared_broker.bootstrap) as raw:
        raw.send_raw(struct.pack(">i", -16) + b"\x00" * 16)
        assert raw.is_closed_by_peer()
    assert_still_serves(shared_broker, "negative-size")


def test_frame_larger_than_socket_request_max_bytes(make_broker) -> None:
    """A size prefix above socket.request.max.bytes is refused before the body is read; frames within
    the limit on another connection are still served."""
    broker = make_broker({"socket.request.max.bytes": "4096"})
    with RawKafka(broker.bootstrap) as raw:
        raw.send_raw(struct.pack(">i", 4097))  # no body: the broker must not wait for 4 KB
        assert raw.is_closed_by_peer()
    with RawKafka(broker.bootstrap) as raw:
        assert raw.request(api_versions_request()).error_code.value == 0
    assert_still_serves(broker, "max-request")


def test_truncated_frame_then_close(shared_broker) -> None:
    """A client that dies mid-frame leaves nothing behind."""
    with RawKafka(shared_broker.bootstrap) as raw:
        raw.send_raw(struct.pack(">i", 100) + header_only(18, 3, 1)[:10])
    assert_still_serves(shared_broker, "truncated")


def test_half_sent_frame_does_not_block_other_clients(shared_broker) -> None:
    """A slow peer stuck mid-frame holds its own connection only (a slowloris must not stall the loop)."""
    with RawKafka(shared_broker.bootstrap) as slow:
        slow.send_raw(struct.pack(">i", 1000) + b"\x00\x12\x00\x03")
        assert_still_serves(shared_broker, "half-sent")
        assert not slow.is_closed_by_peer(wait=0.2)  # still open, still waiting for the rest


def test_valid_header_with_malformed_body_closes_the_connection(shared_broker) -> None:
    """Metadata v12 header, then a body that is not a MetadataRequest: Kafka closes such connections."""
    with RawKafka(shared_broker.bootstrap) as raw:
        raw.send_frame(header_only(3, 12, 7, flexible=True) + b"\xff\xff\xff\x7f\x01\x02")
        assert raw.is_closed_by_peer()
    with RawKafka(shared_broker.bootstrap) as raw:  # a produce whose topic array says 2^31-1 entries
        raw.send_frame(header_only(0, 9, 8, flexible=True) + b"\x00\xff\xff\x00\x00\x13\x88\xff\xff\xff\x0f")
        assert raw.is_closed_by_peer()
    assert_still_serves(shared_broker, "malformed-body")


def test_random_frames_never_hurt_the_broker(broker) -> None:
    """Seeded fuzz over every API the broker advertises, at versions it serves (so the bytes reach the
    body decoder and the handlers), plus a few unknown keys, each frame on its own connection.
    Whatever each gets (an answer or a close), the broker survives, serves, and no handler crashed
    (a crash is logged with a traceback: a request the decoder let through that a handler cannot take).
    Its own broker, so that what it provokes cannot show up in the logs other tests check."""
    with RawKafka(broker.bootstrap) as raw:
        served = [(k.api_key, k.min_version, k.max_version) for k in raw.request(api_versions_request()).api_keys]
    rng = random.Random(20240501)
    connections = []
    try:
        for i in range(300):
            if i % 10 == 9:
                key, version = rng.randrange(100, 32767), rng.randrange(0, 20)
            else:
                key, low, high = rng.choice(served)
                version = rng.randrange(low, high + 1)
            body = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 120)))
            if rng.random() < 0.5:  # a plausible start: empty tagged fields, small counts
                body = b"\x00" + bytes(rng.choice([0, 1, 2, 0xFF]) for _ in range(8)) + body
            raw = RawKafka(broker.bootstrap, timeout=3)
            connections.append(raw)
            raw.send_frame(header_only(key, version, i, flexible=rng.random() < 0.5) + body)
            if len(connections) >= 50:
                time.sleep(0.1)
                for conn in connections:
                    conn.close()
                connections.clear()
        time.sleep(0.5)  # answers, closes or long polls: whichever, the broker has seen every frame
    finally:
        for conn in connections:
            conn.close()
    assert_still_serves(broker, "fuzz")


@pytest.mark.parametrize(("api_key", "version", "body"), [
    (2, 7, struct.pack(">ib", -1, 0) + b"\x00\x00"),  # ListOffsets: topics = null
    (0, 9, b"\x00" + struct.pack(">hi", 1, 1000) + b"\x00\x00"),  # Produce: topic_data = null
    (21, 2, b"\x00" + struct.pack(">i", 1000) + b"\x00"),  # DeleteRecords: topics = null
], ids=["list-offsets", "produce", "delete-records"])
def test_null_for_a_non_nullable_array(broker, api_key: int, version: int, body: bytes) -> None:
    """A null where the schema has a non-nullable array is a malformed request: Kafka's parser refuses
    it and closes the connection. It must not reach a handler as None. (Own broker, as for the fuzz.)"""
    before = broker.logs().count("Traceback")
    with RawKafka(broker.bootstrap) as raw:
        raw.send_frame(header_only(api_key, version, 5, flexible=True) + body)
        assert raw.is_closed_by_peer()
    time.sleep(0.1)
    assert broker.logs().count("Traceback") == before, broker.logs()[-2000:]


# -- unknown APIs and versions --------------------------------------------------------------------


def test_api_versions_v99_answers_unsupported_version_with_the_supported_list(shared_broker) -> None:
    """KIP-511: an ApiVersions request at a version we do not know gets a v0 response carrying
    UNSUPPORTED_VERSION and our supported ranges, so the client can retry at a version we serve."""
    with RawKafka(shared_broker.bootstrap) as raw:
        raw.send_frame(header_only(18, 99, 42, flexible=True))
        frame = raw.read_frame()
        assert struct.unpack_from(">i", frame)[0] == 42
        response, size = entity_reader(ApiVersionsResponseV0)(frame, 4)
        assert 4 + size == len(frame)
        assert response.error_code.value == UNSUPPORTED_VERSION
        ranges = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
        assert ranges[18] == (0, 4)
        assert ranges[0][0] == 0 and ranges[0][1] >= 9  # Produce
        assert ranges[1][0] <= 4 and ranges[1][1] >= 12  # Fetch
        assert {0, 1, 2, 3, 18, 19, 20} <= set(ranges)
        # The connection stays usable: retry at a supported version.
        assert raw.request(api_versions_request()).error_code.value == 0
    assert_still_serves(shared_broker, "api-versions-99")


@pytest.mark.parametrize(("api_key", "version"), [(0, 2), (3, 99), (1, 3), (9999, 0)],
                         ids=["produce-v2", "metadata-v99", "fetch-v3", "unknown-key"])
def test_unsupported_version_or_unknown_api_answers_error_35(shared_broker, api_key: int, version: int) -> None:
    """Versions outside the advertised range and unknown API keys get UNSUPPORTED_VERSION (35) after
    the response header, and the connection keeps working."""
    with RawKafka(shared_broker.bootstrap) as raw:
        raw.send_frame(header_only(api_key, version, 77) + b"\x00" * 8)
        frame = raw.read_frame()
        assert frame == struct.pack(">ih", 77, UNSUPPORTED_VERSION)
        assert raw.request(api_versions_request()).error_code.value == 0
    assert_still_serves(shared_broker, f"unsupported-{api_key}-{version}")


# -- record validation ------------------------------------------------------------------------------


def test_corrupt_crc_is_refused_with_corrupt_message(shared_broker) -> None:
    """A batch whose CRC-32C does not match is CORRUPT_MESSAGE and nothing is stored; an intact batch
    after it gets offset 0."""
    topic = "bad-crc"
    create_topic(shared_broker.bootstrap, topic)
    good = _batch([b"alpha", b"beta", b"gamma"])
    corrupt = bytearray(good)
    corrupt[-2] ^= 0x55  # inside the last record, covered by the CRC
    with RawKafka(shared_broker.bootstrap) as raw:
        assert produce_error(raw, topic, 0, bytes(corrupt)) == (CORRUPT_MESSAGE, -1)
        truncated = good[:-5]  # batchLength promises 5 bytes more than there are
        assert produce_error(raw, topic, 0, truncated)[0] == CORRUPT_MESSAGE
        assert produce_error(raw, topic, 0, good) == (0, 0)
    assert [m.value() for m in consume(shared_broker.bootstrap, topic, count=3)] == [b"alpha", b"beta", b"gamma"]
    assert_still_serves(shared_broker, "crc")


def test_oversized_batch_is_refused_with_message_too_large(shared_broker) -> None:
    """A batch above the topic's max.message.bytes: MESSAGE_TOO_LARGE over the raw protocol and as
    librdkafka's delivery error; smaller records still go in at offset 0."""
    topic = "too-large"
    create_topic(shared_broker.bootstrap, topic, config={"max.message.bytes": "2000"})
    with RawKafka(shared_broker.bootstrap) as raw:
        assert produce_error(raw, topic, 0, _batch([b"x" * 3000])) == (MESSAGE_TOO_LARGE, -1)

    errors: list[KafkaError | None] = []
    producer = Producer(producer_config(shared_broker.bootstrap, **{"compression.codec": "none", "retries": 0}))
    producer.produce(topic, partition=0, value=bytes(range(256)) * 20,
                     on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(10)
    assert [e.code() if e else None for e in errors] == [KafkaError.MSG_SIZE_TOO_LARGE]

    with RawKafka(shared_broker.bootstrap) as raw:
        assert produce_error(raw, topic, 0, _batch([b"small"])) == (0, 0)


def test_broker_message_max_bytes_applies_to_new_topics(make_broker) -> None:
    """The broker-wide message.max.bytes is the default max.message.bytes of every topic."""
    broker = make_broker({"message.max.bytes": "1500"})
    create_topic(broker.bootstrap, "broker-limit")
    with RawKafka(broker.bootstrap) as raw:
        assert produce_error(raw, "broker-limit", 0, _batch([b"y" * 1600])) == (MESSAGE_TOO_LARGE, -1)
        assert produce_error(raw, "broker-limit", 0, _batch([b"y" * 1000])) == (0, 0)


def test_unknown_topic_without_auto_create(make_broker) -> None:
    """auto.create.topics.enable=false: Produce and Metadata for a missing topic answer
    UNKNOWN_TOPIC_OR_PARTITION and do not create it; a missing partition of a real topic too."""
    broker = make_broker({"auto.create.topics.enable": "false"})
    with RawKafka(broker.bootstrap) as raw:
        assert produce_error(raw, "no-such-topic", 0, _batch([b"lost"])) == (UNKNOWN_TOPIC_OR_PARTITION, -1)
        [topic] = raw.request(metadata_request("no-such-topic")).topics
        assert (topic.name, topic.error_code.value) == ("no-such-topic", UNKNOWN_TOPIC_OR_PARTITION)
        [topic] = raw.request(metadata_request("no-such-topic")).topics  # still not created
        assert topic.error_code.value == UNKNOWN_TOPIC_OR_PARTITION
    create_topic(broker.bootstrap, "one-partition")
    with RawKafka(broker.bootstrap) as raw:
        assert produce_error(raw, "one-partition", 3, _batch([b"x"])) == (UNKNOWN_TOPIC_OR_PARTITION, -1)
    assert_still_serves(broker, "no-auto-create")


def test_batch_larger_than_a_segment_is_record_list_too_large(shared_broker) -> None:
    """A batch within max.message.bytes but larger than the topic's segment.bytes cannot be stored:
    Kafka answers RECORD_LIST_TOO_LARGE for that partition and the connection stays usable."""
    topic = "bigger-than-segment"
    create_topic(shared_broker.bootstrap, topic, config={"segment.bytes": str(14 * 1024)})
    with RawKafka(shared_broker.bootstrap) as raw:
        assert produce_error(raw, topic, 0, _batch([b"s" * 20_000])) == (RECORD_LIST_TOO_LARGE, -1)
        assert produce_error(raw, topic, 0, _batch([b"s" * 1000])) == (0, 0)
    assert_still_serves(shared_broker, "bigger-than-segment")


def test_acks_0_produce_error_closes_the_connection(shared_broker) -> None:
    with RawKafka(shared_broker.bootstrap) as raw:
        raw.send_frame(raw.encode(produce_request("acks0-missing-partition", 7, _batch([b"x"]), acks=0)))
        assert raw.is_closed_by_peer(wait=2.0)


def test_pipelined_requests_are_answered_in_order(make_broker) -> None:
    """Requests sent back to back on one connection, more than queued.max.requests of them and with
    a parked long-poll fetch in the middle, are answered in request order (clients match responses
    by position as well as correlation id); acks=0 produces get no answer and do not shift the others."""
    import datetime

    from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic

    broker = make_broker({"queued.max.requests": "4"})
    topic = "pipelined"
    create_topic(broker.bootstrap, topic, partitions=2)
    fetch = FetchRequest(
        replica_id=-1, max_wait=datetime.timedelta(milliseconds=800), min_bytes=1, max_bytes=1_000_000,
        isolation_level=0, session_id=0, session_epoch=-1, forgotten_topics_data=(), rack_id="",
        topics=(FetchTopic(topic=topic, partitions=(FetchPartition(
            partition=1, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1, log_start_offset=-1,
            partition_max_bytes=100_000),)),),
    )
    with RawKafka(broker.bootstrap) as raw:
        plan: list[tuple[int, int, int]] = []  # (correlation id, api key, version) of answered requests
        frames = bytearray()
        for i in range(30):
            if i == 10:
                frames += _framed(raw, fetch, plan)  # parks: partition 1 stays empty
            request = produce_request(topic, 0, _batch([f"m{i}".encode()]), acks=0 if i % 7 == 3 else 1)
            frames += _framed(raw, request, plan, answered=i % 7 != 3)
        frames += _framed(raw, api_versions_request(), plan)
        started = time.monotonic()
        raw.send_raw(bytes(frames))
        base_offsets = []
        for correlation_id, key, version in plan:
            response = raw.read_response(key, version, correlation_id)
            if key == 0:
                [topic_response] = response.responses
                base_offsets.append(topic_response.partition_responses[0].base_offset)
            elif key == 1:
                assert time.monotonic() - started >= 0.7  # the fetch really waited its max_wait
                assert response.responses[0].partitions[0].records in (b"", None)
    assert base_offsets == [i for i in range(30) if i % 7 != 3]
    # The acks=0 records were stored too, in order.
    assert [m.value() for m in consume(broker.bootstrap, topic, count=30)] == [f"m{i}".encode() for i in range(30)]


def _framed(raw: RawKafka, request, plan: list[tuple[int, int, int]], answered: bool = True) -> bytes:  # type: ignore[no-untyped-def]
    payload = raw.encode(request)
    if answered:
        plan.append((raw.correlation_id, int(type(request).__api_key__), int(type(request).__version__)))
    return struct.pack(">i", len(payload)) + payload


def test_acks_all_below_min_insync_replicas_and_invalid_acks(shared_broker) -> None:
    """min.insync.replicas=2 on a one-replica topic: acks=all gets NOT_ENOUGH_REPLICAS and stores nothing,
    acks=1 is accepted; acks=2 is INVALID_REQUIRED_ACKS."""
    topic = "min-isr-2"
    create_topic(shared_broker.bootstrap, topic, config={"min.insync.replicas": "2"})
    with RawKafka(shared_broker.bootstrap) as raw:
        for acks, expected in ((-1, (NOT_ENOUGH_REPLICAS, -1)), (2, (INVALID_REQUIRED_ACKS, -1)), (1, (0, 0))):
            response = raw.request(produce_request(topic, 0, _batch([b"isr"]), acks=acks))
            part = response.responses[0].partition_responses[0]
            assert (acks, part.error_code.value, part.base_offset) == (acks, *expected)


# -- connection lifecycle -----------------------------------------------------------------------------


def test_idle_connections_are_reaped(make_broker) -> None:
    """connections.max.idle.ms=500: a silent connection is closed soon after 500 ms; a connection
    that keeps sending requests stays open."""
    broker = make_broker({"connections.max.idle.ms": "500"})
    idle = RawKafka(broker.bootstrap)
    busy = RawKafka(broker.bootstrap)
    try:
        assert idle.request(api_versions_request()).error_code.value == 0
        start = time.monotonic()
        while time.monotonic() - start < 1.5:
            assert busy.request(api_versions_request()).error_code.value == 0
            time.sleep(0.1)
        assert idle.is_closed_by_peer(wait=1.0)
        assert busy.request(api_versions_request()).error_code.value == 0
    finally:
        idle.close()
        busy.close()
    assert_still_serves(broker, "idle")


# -- bad configuration -------------------------------------------------------------------------------


def _run_broker(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    port, controller = free_port(), free_port()
    base = ["--override", f"log.dirs={tmp_path / 'data'}",
            "--override", f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}",
            "--override", f"controller.quorum.voters=1@127.0.0.1:{controller}"]
    start = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "bus", "broker", *base, *args], cwd=ROOT, capture_output=True,
                            text=True, timeout=30)
    elapsed = time.monotonic() - start
    # Belt and braces: whatever happened, nothing may still listen on the port we gave it.
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0
    return result, elapsed


@pytest.mark.parametrize(("args", "mentions"), [
    (["--override", "num.partitions=abc"], "num.partitions"),
    (["--override", "listeners=PLAINTEXT://127.0.0.1"], "listeners"),
    (["--override", "listeners=PLAINTEXT://127.0.0.1:notaport,CONTROLLER://127.0.0.1:1"], "notaport"),
    (["--override", "message.max.bytes=-5"], "message.max.bytes"),
    (["--override", "novalue"], "novalue"),
], ids=["num-partitions-abc", "listener-without-port", "listener-bad-port", "negative-max-bytes",
        "override-without-equals"])
def test_bad_config_exits_non_zero_quickly(tmp_path: Path, args: list[str], mentions: str) -> None:
    result, elapsed = _run_broker(tmp_path, *args)
    assert result.returncode != 0
    assert mentions in result.stderr, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert elapsed < 10, f"took {elapsed:.1f}s to refuse a bad config"


def test_missing_properties_file_exits_non_zero_quickly(tmp_path: Path) -> None:
    missing = tmp_path / "does-not-exist.properties"
    result, elapsed = _run_broker(tmp_path, str(missing))
    assert result.returncode != 0
    assert str(missing) in result.stderr, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert elapsed < 10


def test_data_dir_of_another_node_is_refused(tmp_path: Path, make_broker) -> None:
    """A log dir formatted by node 1 is not silently adopted by node 2 (meta.properties check)."""
    broker = make_broker()
    assert broker.stop() == 0, broker.logs()[-2000:]
    port, controller = free_port(), free_port()
    result = subprocess.run(
        [sys.executable, "-m", "bus", "broker", "--override", f"log.dirs={broker.data_dir}", "--override", "node.id=2",
         "--override", f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}",
         "--override", f"controller.quorum.voters=2@127.0.0.1:{controller}"],
        cwd=ROOT, capture_output=True, text=True, timeout=30,
    )
    assert result.returncode != 0, (result.stdout, result.stderr)
    assert "node" in result.stderr and "meta.properties" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
