"""``/api/v1/watchlist`` against a real console, broker and HBase gateway.

Commands must reach the compacted control topic as the contract shapes them (read back with a plain
confluent-kafka consumer), a removal must be a tombstone, bad commands must be 422 naming the field and
publish nothing, and hits must come back from the hit loader's tables newest first with a trajectory.
"""

from __future__ import annotations

import base64
import json
import struct
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import happybase
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from contracts.records import Kind
from contracts.retention import Retention
from contracts.surveillance import decode_embedding, hit_record, watch_hit_id
from contracts.tables.surveillance import ensure_surveillance_tables, hit_rows
from testkit import web_data as data

WATCHLIST = "control.watchlist"


def read_topic(bootstrap: str, topic: str) -> list[tuple[str, Any]]:
    """Every (key, value) of a one-partition topic from its beginning; value None for a tombstone."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"t-{uuid.uuid4().hex}",
                         "enable.auto.commit": False})
    try:
        tp = TopicPartition(topic, 0)
        _low, high = consumer.get_watermark_offsets(tp, timeout=10)
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        out: list[tuple[str, Any]] = []
        deadline = time.monotonic() + 20
        position = 0
        while position < high and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error():
                continue
            position = message.offset() + 1
            key, raw = message.key(), message.value()
            if key is None:
                continue  # foreign: other tests sharing this broker write keyless ones (test_audit_trail, to audit)
            try:
                out.append((key.decode(), None if raw is None else json.loads(raw)))
            except ValueError:  # not UTF-8 or not JSON: likewise foreign
                continue
        return out
    finally:
        consumer.close()


def wait_for(predicate: Any, timeout: float = 20) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def listed(console: Any, watch_id: str) -> dict[str, Any] | None:
    page = console.client("viewer").get("/api/v1/watchlist", params={"limit": 500}).json()
    return next((w for w in page["items"] if w["watch_id"] == watch_id), None)


def audit_entries(console: Any, action: str, target: str) -> list[dict[str, Any]]:
    return [e for e in console.audit(action=action, q=target) if e["target"] == target]


def test_roles(console) -> None:
    assert console.client(None).get("/api/v1/watchlist").status_code == 401
    assert console.client("viewer").get("/api/v1/watchlist").status_code == 200
    response = console.client("viewer").post("/api/v1/watchlist", json={"kind": "plate", "plate": "浙A12345"})
    assert response.status_code == 403
    assert console.client("viewer").delete("/api/v1/watchlist/plate-x").status_code == 403


def test_plate_watch_is_published_listed_and_removed_by_tombstone(console) -> None:
    operator = console.client("operator")
    response = operator.post("/api/v1/watchlist", json={"kind": "plate", "plate": "浙a77d01", "reason": "stolen",
                                                        "districts": ["330102"]})
    assert response.status_code == 201, response.text
    watch = response.json()
    watch_id = watch["watch_id"]
    assert watch["plate"] == "浙A77D01" and watch["status"] == "pending" and watch["requested_by"] == "operator"
    records = dict(read_topic(console.backing.broker.bootstrap, WATCHLIST))
    assert records[watch_id]["plate"] == "浙A77D01" and records[watch_id]["districts"] == ["330102"]
    assert records[watch_id]["kind"] == "plate" and records[watch_id]["requested_by"] == "operator"
    admin = AdminClient({"bootstrap.servers": console.backing.broker.bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, WATCHLIST)
    config = admin.describe_configs([resource])[resource].result(10)
    assert config["cleanup.policy"].value == "compact"  # created by the console as the contract says
    assert listed(console, watch_id)["hits"] == 0

    assert operator.delete(f"/api/v1/watchlist/{watch_id}").status_code == 200
    assert read_topic(console.backing.broker.bootstrap, WATCHLIST)[-1] == (watch_id, None)
    assert listed(console, watch_id) is None
    assert operator.delete(f"/api/v1/watchlist/{watch_id}").status_code == 404
    assert [e["user"] for e in audit_entries(console, "watch.add", "浙A77D01")] == ["operator"]
    assert any(e["outcome"] == "ok" for e in audit_entries(console, "watch.remove", watch_id))


@pytest.mark.parametrize(("body", "field"), [
    ({"kind": "plate", "plate": "ABC"}, "plate"),
    ({"kind": "plate"}, "plate"),
    ({"kind": "face", "feature": "not base64!"}, "feature"),
    ({"kind": "face", "feature": base64.b64encode(b"\0" * 100).decode()}, "feature"),
    ({"kind": "face", "feature": base64.b64encode(struct.pack("<128f", *[1.0] * 128)).decode(), "threshold": 1.5},
     "threshold"),
    ({"kind": "face", "capture": "no-such-record"}, "capture"),
    ({"kind": "car", "plate": "浙A12345"}, "kind"),
    ({"kind": "plate", "plate": "浙A12345", "checkpoints": ["nowhere"]}, "checkpoints"),
    ({"kind": "plate", "plate": "浙A12345", "color": "red"}, "color"),
])
def test_bad_commands_are_422_naming_the_field_and_publish_nothing(console, body: dict[str, Any], field: str) -> None:
    before = len(read_topic(console.backing.broker.bootstrap, WATCHLIST)) if _topic_exists(console) else 0
    response = console.client("operator").post("/api/v1/watchlist", json=body)
    assert response.status_code == 422, response.text
    assert field in [part for error in response.json()["detail"] for part in error["loc"]], response.text
    after = len(read_topic(console.backing.broker.bootstrap, WATCHLIST)) if _topic_exists(console) else 0
    assert after == before


def _topic_exists(console: Any) -> bool:
    admin = AdminClient({"bootstrap.servers": console.backing.broker.bootstrap})
    return WATCHLIST in admin.list_topics(timeout=10).topics


def test_face_watch_from_a_face_capture_carries_its_feature(console) -> None:
    pairs = list(data.valid_records(40, seed=31, face_share=0.5))
    data.load(console.backing.gateway.port, pairs)
    face = next(record for kind, record in pairs if kind is Kind.FACE)
    response = console.client("operator").post("/api/v1/watchlist", json={"kind": "face", "capture": face["record_id"],
                                                                          "threshold": 0.9})
    assert response.status_code == 201, response.text
    watch = response.json()
    assert watch["capture"] == face["record_id"] and watch["threshold"] == 0.9
    published = dict(read_topic(console.backing.broker.bootstrap, WATCHLIST))[watch["watch_id"]]
    assert base64.b64decode(published["feature"]) == decode_embedding(face["feature"])
    assert published["capture"] == face["record_id"]


def test_hits_newest_first_with_trajectory_counts_and_cursor(console) -> None:
    watch_id = console.client("operator").post("/api/v1/watchlist", json={"kind": "plate", "plate": "浙B55555"}).json()[
        "watch_id"]
    city = json.loads(console.map_path.read_text())
    checkpoints = city["checkpoints"][:5]
    base = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
    hits = [hit_record(hit_id=watch_hit_id(watch_id, f"r{n}"), watch_id=watch_id, kind="plate", match="exact",
                       record_id=f"r{n}", checkpoint_id=checkpoints[n]["checkpoint_id"],
                       capture_time=(base + timedelta(minutes=n)).isoformat(timespec="milliseconds"), score=1.0,
                       location={}, detected_at=base.isoformat(), plate="浙B55555") for n in range(5)]
    conn = happybase.Connection("127.0.0.1", console.backing.gateway.port)
    try:
        ensure_surveillance_tables(conn, Retention().hits_ttl_s)
        for hit in hits:
            for table, key, cells in hit_rows(hit):
                conn.table(table).put(key, cells)
    finally:
        conn.close()
    viewer = console.client("viewer")
    first = viewer.get(f"/api/v1/watchlist/{watch_id}/hits", params={"limit": 3}).json()
    assert [h["record_id"] for h in first["items"]] == ["r4", "r3", "r2"]
    assert [p["record_id"] for p in first["trajectory"]] == ["r2", "r3", "r4"]
    # a hit without a location gets its checkpoint's from the map
    assert first["trajectory"][0]["location"]["lat"] == checkpoints[2]["lat"]
    assert first["watch"]["hits"] == 5
    assert datetime.fromisoformat(first["watch"]["last_hit"]) == datetime.fromisoformat(hits[4]["capture_time"])
    second = viewer.get(f"/api/v1/watchlist/{watch_id}/hits", params={"limit": 3, "cursor": first["next"]}).json()
    assert [h["record_id"] for h in second["items"]] == ["r1", "r0"] and second["next"] is None
    assert listed(console, watch_id)["hits"] == 5
    other = console.client("operator").post("/api/v1/watchlist", json={"kind": "plate", "plate": "浙B66666"}).json()
    response = viewer.get(f"/api/v1/watchlist/{other['watch_id']}/hits", params={"cursor": first["next"]})
    assert response.status_code == 422 and response.json()["detail"][0]["loc"] == ["query", "cursor"]
    assert viewer.get("/api/v1/watchlist/no-such-watch/hits").status_code == 404
    recent = viewer.get("/api/v1/hits", params={"limit": 500}).json()
    assert [h["hit_id"] for h in recent if h["watch_id"] == watch_id] == [h["hit_id"] for h in reversed(hits)]
