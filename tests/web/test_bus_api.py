"""``/api/v1/bus/*`` through a real console against the real broker, judged with confluent-kafka clients."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from confluent_kafka import Consumer, Producer

from deploy.processes.console import ConsoleProcess
from testkit.raw_kafka import RawKafka, produce_error
from tests.web._bad_records import (
    WRONG_SHAPES,
    header_name_batch,
    skipped_counts,
    undecompressible_batch,
)

_counter = iter(range(1_000_000))


def unique(prefix: str) -> str:
    return f"{prefix}-{time.monotonic_ns() % 10**9}-{next(_counter)}"


@pytest.fixture
def admin(console: ConsoleProcess) -> httpx.Client:
    return console.client("admin")


@pytest.fixture
def viewer(console: ConsoleProcess) -> httpx.Client:
    return console.client("viewer")


@pytest.fixture
def topic(admin: httpx.Client) -> Iterator[str]:
    name = unique("bus-api")
    response = admin.post("/api/v1/bus/topics", json={"name": name, "partitions": 3,
                                                        "config": {"retention.ms": "7200000"}})
    assert response.status_code == 201, response.text
    yield name
    admin.delete(f"/api/v1/bus/topics/{name}")


def produce(console: ConsoleProcess, topic: str, count: int, **extra: object) -> None:
    producer = Producer({"bootstrap.servers": console.backing.broker.bootstrap})
    for i in range(count):
        producer.produce(topic, key=f"k{i}".encode(), value=json.dumps({"n": i}).encode(), partition=i % 3,
                         timestamp=1_700_000_000_000 + i, **extra)  # type: ignore[arg-type]
    assert producer.flush(15) == 0


def consume_and_commit(console: ConsoleProcess, topic: str, group: str, count: int) -> Consumer:
    """A live member of ``group`` that has read and committed ``count`` records (still in the group)."""
    consumer = Consumer({"bootstrap.servers": console.backing.broker.bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    seen = 0
    deadline = time.monotonic() + 30
    while seen < count and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            seen += 1
    assert seen == count
    consumer.commit(asynchronous=False)
    return consumer


def test_brokers(viewer: httpx.Client, console: ConsoleProcess) -> None:
    body = viewer.get("/api/v1/bus/brokers").json()
    assert [(b["host"], b["port"], b["is_controller"]) for b in body["brokers"]] == \
        [("127.0.0.1", console.backing.broker.port, True)]
    assert body["controller_id"] == body["brokers"][0]["id"] and body["cluster_id"]


def test_topics_show_partitions_leaders_sizes_and_retention(viewer: httpx.Client, console: ConsoleProcess,
                                                            topic: str) -> None:
    listed = {t["name"]: t for t in viewer.get("/api/v1/bus/topics").json()}
    assert listed[topic]["partitions"] == 3 and listed[topic]["size_bytes"] == 0
    assert listed[topic]["retention_ms"] == 7_200_000 and listed[topic]["cleanup_policy"] == "delete"
    assert not any(name.startswith("__") for name in listed)
    produce(console, topic, 30)
    detail = viewer.get(f"/api/v1/bus/topics/{topic}").json()
    assert [(p["partition"], p["start_offset"], p["end_offset"]) for p in detail["partitions"]] == \
        [(0, 0, 10), (1, 0, 10), (2, 0, 10)]
    assert all(p["leader"] in p["replicas"] and p["isr"] == p["replicas"] for p in detail["partitions"])
    assert all(p["size_bytes"] > 0 for p in detail["partitions"])
    assert detail["size_bytes"] == sum(p["size_bytes"] for p in detail["partitions"])
    assert detail["configs"]["retention.ms"] == {"value": "7200000", "source": "dynamic_topic_config",
                                                 "default": False}
    assert viewer.get("/api/v1/bus/topics/no-such-topic").status_code == 404


def test_messages_latest_n_with_key_value_and_headers(viewer: httpx.Client, console: ConsoleProcess,
                                                     topic: str) -> None:
    produce(console, topic, 12, headers=[("trace", b"\xff\x00binary"), ("source", b"test")])
    messages = viewer.get(f"/api/v1/bus/topics/{topic}/messages", params={"limit": 5}).json()
    assert [m["value"]["data"] for m in messages] == [json.dumps({"n": n}) for n in (11, 10, 9, 8, 7)]
    first = messages[0]
    assert first["key"] == {"encoding": "utf-8", "data": "k11", "size": 3, "truncated": False}
    assert first["timestamp"] == 1_700_000_000_011 and first["partition"] == 11 % 3
    trace = first["headers"][0]
    assert trace["key"] == "trace" and trace["value"]["encoding"] == "base64"
    assert base64.b64decode(trace["value"]["data"]) == b"\xff\x00binary"
    one = viewer.get(f"/api/v1/bus/topics/{topic}/messages", params={"limit": 100, "partition": 1}).json()
    assert [m["offset"] for m in one] == [3, 2, 1, 0] and {m["partition"] for m in one} == {1}
    bad = viewer.get(f"/api/v1/bus/topics/{topic}/messages", params={"partition": 7})
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["query", "partition"]
    assert viewer.get("/api/v1/bus/topics/nope/messages").status_code == 404
    # Reading messages is not a consumer group.
    assert not [g for g in viewer.get("/api/v1/bus/groups").json() if g["group_id"].startswith("console")]


def test_messages_show_what_cannot_be_decoded_and_the_page_still_answers(viewer: httpx.Client,
                                                                         console: ConsoleProcess, topic: str) -> None:
    """Partition 0: garbage, the wrong JSON shapes, a record with fields missing, one whose header name is not
    UTF-8, then a good one; partition 1: a good one, then a batch that does not decompress."""
    producer = Producer({"bootstrap.servers": console.backing.broker.bootstrap})
    for value in (*WRONG_SHAPES, b'{"record_id": "r-1"}'):
        producer.produce(topic, value, key=b"bad", partition=0)
    producer.produce(topic, b"good before", partition=1)
    assert producer.flush(10) == 0
    with RawKafka(console.backing.broker.bootstrap, timeout=10) as raw:
        assert produce_error(raw, topic, 0, header_name_batch(b"\xff\xfe-name", b"k", b"headed"))[0] == 0
        assert produce_error(raw, topic, 1, undecompressible_batch(3)) == (0, 1)
    producer.produce(topic, b"good after", partition=0)
    assert producer.flush(10) == 0

    for _ in range(3):  # counted once, however often the page is loaded (the crash came with the second)
        response = viewer.get(f"/api/v1/bus/topics/{topic}/messages", params={"limit": 50})
        assert response.status_code == 200, response.text
        by_offset = {(m["partition"], m["offset"]): m for m in response.json()}
    shown = [(by_offset[(0, n)]["value"]["encoding"], by_offset[(0, n)]["undecodable"]) for n in range(7)]
    assert shown == [("base64", None)] + [("utf-8", None)] * 4 + [("utf-8", "a header name is not UTF-8"),
                                                                   ("utf-8", None)]
    headed = by_offset[(0, 5)]
    assert (headed["key"]["data"], headed["value"]["data"], headed["headers"]) == ("k", "headed", [])
    assert by_offset[(0, 6)]["value"]["data"] == "good after"
    assert by_offset[(1, 0)]["value"]["data"] == "good before" and by_offset[(1, 0)]["undecodable"] is None
    unreadable = by_offset[(1, 1)]
    assert unreadable["value"] is None and "ecompress" in unreadable["undecodable"]
    assert skipped_counts(httpx.get(f"{console.url}/metrics").text, "messages") == {
        (topic, "header name not UTF-8"): 1, (topic, "unreadable batch"): 1}


def test_groups_lag_per_partition_and_offset_reset(admin: httpx.Client, viewer: httpx.Client,
                                                   console: ConsoleProcess, topic: str) -> None:
    produce(console, topic, 30)
    group = unique("g")
    consumer = consume_and_commit(console, topic, group, 30)
    try:
        other = unique("g")
        consume_and_commit(console, topic, other, 30).close()  # several groups: one OffsetFetch each
        produce(console, topic, 6)  # 2 more per partition, not consumed
        listed = {g["group_id"]: g for g in viewer.get("/api/v1/bus/groups").json()}
        summary = listed[group]
        assert listed[other]["state"] == "empty" and listed[other]["total_lag"] == 6
        assert summary["state"] == "stable" and summary["members"] == 1 and summary["total_lag"] == 6
        detail = viewer.get(f"/api/v1/bus/groups/{group}").json()
        assert [(p["partition"], p["committed"], p["end_offset"], p["lag"]) for p in detail["partitions"]] == \
            [(0, 10, 12, 2), (1, 10, 12, 2), (2, 10, 12, 2)]
        member = detail["members"][0]
        assert {p["member_id"] for p in detail["partitions"]} == {member["member_id"]}
        # While the group has a member, the reset is refused (and audited as refused).
        refused = admin.post(f"/api/v1/bus/groups/{group}/reset-offsets", json={"to": "earliest"})
        assert refused.status_code == 409, refused.text
        assert viewer.post(f"/api/v1/bus/groups/{group}/reset-offsets", json={"to": "earliest"}).status_code == 403
    finally:
        consumer.close()
    deadline = time.monotonic() + 15
    while viewer.get(f"/api/v1/bus/groups/{group}").json()["members"] and time.monotonic() < deadline:
        time.sleep(0.2)
    done = admin.post(f"/api/v1/bus/groups/{group}/reset-offsets", json={"to": "earliest"})
    assert done.status_code == 200, done.text
    assert [(c["partition"], c["previous"], c["offset"]) for c in done.json()] == [(0, 10, 0), (1, 10, 0), (2, 10, 0)]
    assert viewer.get(f"/api/v1/bus/groups/{group}").json()["total_lag"] == 36
    # To a time: the producer stamped record i at 1_700_000_000_000 + i, partition i % 3.
    when = datetime.fromtimestamp(1_700_000_000.015, UTC).isoformat()
    at = admin.post(f"/api/v1/bus/groups/{group}/reset-offsets",
                    json={"to": "datetime", "datetime": when, "topic": topic, "partitions": [0]})
    assert at.json() == [{"topic": topic, "partition": 0, "previous": 0, "offset": 5}]
    clamped = admin.post(f"/api/v1/bus/groups/{group}/reset-offsets", json={"to": "offset", "offset": 10**9})
    assert [c["offset"] for c in clamped.json()] == [12, 12, 12]
    missing = admin.post(f"/api/v1/bus/groups/{group}/reset-offsets", json={"to": "offset"})
    assert missing.status_code == 422 and missing.json()["detail"][0]["loc"] == ["body", "offset"]
    resets = console.audit(lambda found: len(found) >= 4, action="group.reset_offsets", q=group)
    assert len(resets) == 4 and resets[-1]["outcome"].startswith("refused")
    assert all(e["user"] == "admin" for e in resets)
    assert viewer.get("/api/v1/bus/groups/no-such-group").status_code == 404


def test_topic_create_and_delete_are_admin_only_and_audited(admin: httpx.Client, viewer: httpx.Client,
                                                            console: ConsoleProcess) -> None:
    name = unique("made")
    assert viewer.post("/api/v1/bus/topics", json={"name": name}).status_code == 403
    assert console.client("operator").post("/api/v1/bus/topics", json={"name": name}).status_code == 403
    created = admin.post("/api/v1/bus/topics", json={"name": name, "partitions": 2})
    assert created.status_code == 201 and len(created.json()["partitions"]) == 2
    # left out, the replication factor is the broker's default.replication.factor
    assert [len(p["replicas"]) for p in created.json()["partitions"]] == [1, 1]
    assert admin.post("/api/v1/bus/topics", json={"name": name}).status_code == 409
    for body, field in (({"name": "bad name"}, "name"), ({"name": ".."}, "name"),
                        ({"name": "x", "partitions": 0}, "partitions"),
                        ({"name": unique("rf"), "replication_factor": 3}, "replication_factor"),
                        ({"name": unique("cfg"), "config": {"retention.ms": "soon"}}, "config")):
        response = admin.post("/api/v1/bus/topics", json=body)
        assert response.status_code == 422, (body, response.text)
        assert response.json()["detail"][0]["loc"] == ["body", field]
    assert viewer.delete(f"/api/v1/bus/topics/{name}").status_code == 403
    assert admin.delete(f"/api/v1/bus/topics/{name}").status_code == 204
    assert admin.delete(f"/api/v1/bus/topics/{name}").status_code == 404
    audit = [e for e in console.audit(lambda found: len(found) >= 4, q=name) if e["target"] == name]
    assert [(e["action"], e["outcome"].split(":")[0]) for e in audit] == [
        ("topic.delete", "refused"), ("topic.delete", "ok"), ("topic.create", "refused"), ("topic.create", "ok")]


@pytest.mark.slow
def test_lag_history_is_sampled_and_survives_a_console_restart(make_console: Any, console: ConsoleProcess,
                                                               admin: httpx.Client, topic: str) -> None:
    produce(console, topic, 9)
    group = unique("hist")
    consume_and_commit(console, topic, group, 9).close()
    produce(console, topic, 3)  # lag 1 per partition from now on
    first = make_console(lag_sample_interval_s=1)
    client = first.client("viewer")
    deadline = time.monotonic() + 30
    points: list[dict] = []
    while len(points) < 4 and time.monotonic() < deadline:  # more than an hourly sampler's window holds
        time.sleep(0.5)
        points = client.get(f"/api/v1/bus/groups/{group}/lag-history").json()["points"]
    assert len(points) >= 4, points
    assert all(p["total"] == 3 for p in points)
    assert [p["time_ms"] % 1000 for p in points] == [0] * len(points)  # rounded to the interval
    assert [p["time_ms"] for p in points] == sorted({p["time_ms"] for p in points})
    assert sorted((q["partition"], q["lag"]) for q in points[0]["partitions"]) == [(0, 1), (1, 1), (2, 1)]
    first.stop()
    second = make_console(lag_sample_interval_s=3600)
    again = second.client("viewer").get(f"/api/v1/bus/groups/{group}/lag-history").json()
    assert all(point in again["points"] for point in points)
    assert second.client("viewer").get("/api/v1/bus/groups/nope/lag-history").status_code == 404
    old = second.client("viewer").get(f"/api/v1/bus/groups/{group}/lag-history", params={"minutes": 0})
    assert old.status_code == 422
