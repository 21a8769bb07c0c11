"""Face search across history: the per-day index alone, then ``POST /api/v1/captures/faces/similar`` for real.

The API tests run a console on the session's broker and a gateway of their own (the shared gateway's ``face`` table
holds the other tests' faces), with their own face topic. 20,000 face captures over ten days, written as the ingest
job writes them, hide a few planted people: each seen ~40 times with more or less recogniser noise, so some of
their sightings score near the default threshold. Every answer is compared with an exact numpy cosine search.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from contracts.config import load as load_config
from contracts.records import CITY_TZ, UNRECOGNIZED, encode, encode_feature, epoch_ms, format_time
from contracts.topics import Topics
from deploy.processes.console import Backing, ConsoleProcess, password_of, start_console
from deploy.processes.gateway import start_gateway
from ingest.city import build_city
from testkit.faces import PEOPLE, Planted, load_faces, plant, unit_rows
from tests.web.conftest import MAP_CHECKPOINTS, MAP_SEED
from tests.web.test_watchlist_api import read_topic
from web.app import create_app
from web.auth.roles import Role
from web.dependencies import ViewerDep
from web.models.auth import UserOut
from web.services.face_index import DAY_MS, Face, FaceIndex, Where, city_day, day_end_ms, unit_vector
from web.settings import ConsoleSettings

REASON = "case 2026-0929"
FACES = 20_000
DAYS = 10
DEFAULT_MIN_SCORE = 0.8
TOPICS = Topics()
pytestmark = [pytest.mark.xdist_group("face_search")]


# -- the index alone --------------------------------------------------------------------------------------------
def test_city_days_follow_the_citys_midnight() -> None:
    midnight = epoch_ms("2026-11-30T00:00:00.000+08:00")
    assert city_day(midnight) == city_day(midnight - 1) + 1
    assert day_end_ms(city_day(midnight - 1)) == midnight
    assert city_day(epoch_ms("2026-11-29T16:30:00.000+00:00")) == city_day(midnight)  # 00:30 in the city


def test_unit_vector_refuses_the_wrong_length_and_unnormalised_features() -> None:
    with pytest.raises(ValueError, match="128 components"):
        unit_vector([1.0] * 127)
    with pytest.raises(ValueError, match="not normalised"):
        unit_vector([1.0] * 128)
    with pytest.raises(ValueError, match="NaN"):
        unit_vector([float("nan")] + [0.0] * 127)
    almost = np.full(128, 1 / np.sqrt(128), dtype=np.float32) * 1.0005  # within the schema's tolerance: rescaled
    assert np.linalg.norm(unit_vector(almost.tolist())) == pytest.approx(1.0, abs=1e-6)


def test_the_index_is_exact_deduplicated_filtered_and_drops_whole_days() -> None:
    rng = np.random.default_rng(1)
    rows = unit_rows(rng, 3000)
    start = epoch_ms("2026-11-20T00:00:00.000+08:00")
    faces = [Face(f"r{i}", start + i * 600_000, f"33010{i % 3}#{i % 5}#0#0", rows[i:i + 1]) for i in range(3000)]
    index = FaceIndex()
    assert index.add(faces) == 3000
    assert index.add(faces[:10]) == 0  # the scan and the bus overlap on purpose: nothing twice
    assert len(index) == 3000 and index.days == city_day(faces[-1].capture_ms) - city_day(start) + 1
    query = rows[7:8]
    where = Where(start + 3 * DAY_MS, start + 12 * DAY_MS)
    hits, matched = index.search(query, where, 0.1, 5)
    scores = (rows @ query.T).ravel()
    exact = [i for i in range(3000) if scores[i] >= np.float32(0.1) and where.holds(faces[i].capture_ms, "x")]
    assert matched == len(exact) and len(hits) == 5
    assert [h.score for h in hits] == sorted((round(float(scores[i]), 6) for i in exact), reverse=True)[:5]
    everything = Where(start, start + 30 * DAY_MS)
    assert index.search(query, everything, 0.99, 10)[0][0].record_id == "r7"  # itself, score 1.0
    assert index.search(query, everything, 0.99, 10)[0][0].score == 1.0
    in_place = Where(start, start + 30 * DAY_MS, district="330102")
    assert {h.checkpoint_id[:6] for h in index.search(query, in_place, 0.0, 1000)[0]} == {"330102"}
    one = Where(start, start + 30 * DAY_MS, checkpoint="330101#1#0#0")
    assert {h.checkpoint_id for h in index.search(query, one, 0.0, 1000)[0]} == {"330101#1#0#0"}
    vector = index.vector_of("r7")
    assert vector is not None and np.allclose(vector, query)
    assert index.vector_of("nobody") is None
    # Retention: whole days go, the others stay searchable.
    dropped = index.drop_before(day_end_ms(city_day(start) + 2))
    assert dropped == sum(1 for f in faces if city_day(f.capture_ms) <= city_day(start) + 2)
    assert index.vector_of("r0") is None and index.vector_of("r2999") is not None
    assert len(index) == 3000 - dropped


# -- the data of the API tests ----------------------------------------------------------------------------------
def start_face_console(backing: Backing, topic: str, users: tuple[str, ...] = ()) -> ConsoleProcess:
    """A console on ``backing`` following ``topic`` as its face topic; ``users`` made (the gateway keeps them)."""
    proc = start_console(backing, topics={"face": topic})
    for role in users:
        result = proc.cli("users", "add", role, "--role", role, stdin=password_of(role) + "\n")
        assert result.returncode == 0, result.stderr
    return proc


def wait_ready(client: httpx.Client, timeout: float = 120) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        body = client.get("/api/v1/captures/faces/status").json()
        if body["ready"]:
            return body
        assert time.monotonic() < deadline, f"the face index is still building: {body}"
        time.sleep(0.2)


def send(bootstrap: str, topic: str, values: list[bytes], keys: list[str]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for value, key in zip(values, keys, strict=True):
        producer.produce(topic, value, key=key.encode())
    assert producer.flush(15) == 0


@dataclass
class Site:
    console: ConsoleProcess
    data: Planted
    topic: str
    backing: Backing
    start_ms: int
    end_ms: int
    build: dict[str, Any]

    def search(self, **body: Any) -> httpx.Response:
        payload = {"from": format_time(datetime.fromtimestamp(self.start_ms / 1000, CITY_TZ)),
                   "to": format_time(datetime.fromtimestamp(self.end_ms / 1000, CITY_TZ)), "reason": REASON, **body}
        return self.console.client("viewer").post("/api/v1/captures/faces/similar", json=payload)


@pytest.fixture(scope="module")
def site(console_backing: Backing, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """20,000 faces in a gateway of its own, a face topic of its own (2 partitions), and a console on them."""
    root = tmp_path_factory.mktemp("face-search")
    city = build_city(MAP_SEED, MAP_CHECKPOINTS)
    city.save(root / "deployment_map.json")
    topic = f"capture.face.search-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": console_backing.broker.bootstrap})
    for future in admin.create_topics([NewTopic(topic, 2, 1)]).values():
        future.result(30)
    now = datetime.now(CITY_TZ).replace(microsecond=0)
    first = now - timedelta(days=DAYS)
    data = plant(FACES, first, timedelta(days=DAYS) - timedelta(hours=2), city)
    gateway = start_gateway(root / "hbase", log_dir=root)
    backing = Backing(console_backing.broker, gateway, root)
    console = None
    try:
        load_faces(gateway.port, data.records)
        console = start_face_console(backing, topic, ("viewer",))
        build = wait_ready(console.client("viewer"))
        yield Site(console, data, topic, backing, epoch_ms(format_time(first)) - 1, epoch_ms(format_time(now)), build)
    finally:
        if console is not None:
            console.stop()
        gateway.kill()


def ids(response: httpx.Response) -> list[str]:
    assert response.status_code == 200, response.text
    return [item["record_id"] for item in response.json()["items"]]


# -- the API -----------------------------------------------------------------------------------------------------
def test_the_console_builds_the_index_from_hbase_at_start(site: Site) -> None:
    assert site.build["faces"] == FACES and site.build["days"] in (DAYS, DAYS + 1)
    assert site.build["build_seconds"] is not None and site.build["build_seconds"] < 60
    metrics = httpx.get(f"{site.console.url}/metrics").text
    assert f"console_face_index_faces {float(FACES)}" in metrics
    assert f"console_face_index_build_seconds {float(site.build['build_seconds'])}" in metrics


def test_recall_and_precision_against_exact_search_at_the_default_threshold(site: Site) -> None:
    """Each planted person, asked by one of their captures and by a feature: the answer is the exact answer."""
    recalls, precisions, near_threshold = [], [], 0
    for sightings in site.data.people:
        query_at = sightings[0]
        query = site.data.vectors[query_at]
        expected = site.data.exact(query / np.linalg.norm(query), site.start_ms, site.end_ms, DEFAULT_MIN_SCORE)
        for body in ({"capture": site.data.records[query_at]["record_id"]},
                     {"feature": site.data.records[query_at]["feature"]}):
            response = site.search(**body, limit=1000)
            got = ids(response)
            recalls.append(len(expected & set(got)) / len(expected))
            precisions.append(len(expected & set(got)) / max(1, len(got)))
            items = response.json()["items"]
            assert items[0]["record_id"] == site.data.records[query_at]["record_id"] and items[0]["score"] == 1.0
            assert [i["score"] for i in items] == sorted((i["score"] for i in items), reverse=True)
            assert all(i["score"] >= DEFAULT_MIN_SCORE and i["location"]["lat"] for i in items)
            assert response.json()["min_score"] == DEFAULT_MIN_SCORE
        near_threshold += sum(1 for i in sightings if 0.75 < float(site.data.vectors[i] @ query) < 0.85)
    assert min(recalls) >= 0.95 and min(precisions) >= 0.95, (recalls, precisions)
    assert near_threshold >= PEOPLE  # the threshold was put to the test, not only easy matches


def test_time_range_place_and_limit_narrow_the_answer(site: Site) -> None:
    person = site.data.people[1]
    query_record = site.data.records[person[0]]
    times = sorted(epoch_ms(site.data.records[i]["capture_time"]) for i in person)
    start_ms, end_ms = times[5], times[30]
    body = {"capture": query_record["record_id"], "min_score": 0.5,
            "from": format_time(datetime.fromtimestamp(start_ms / 1000, CITY_TZ)),
            "to": format_time(datetime.fromtimestamp(end_ms / 1000, CITY_TZ))}
    query = site.data.vectors[person[0]]
    assert set(ids(site.search(**body))) == site.data.exact(query, start_ms, end_ms, 0.5)
    district = query_record["checkpoint_id"].split("#")[0]
    in_district = site.search(capture=query_record["record_id"], min_score=0.5, district=district)
    assert set(ids(in_district)) == site.data.exact(query, site.start_ms, site.end_ms, 0.5, district)
    at = site.search(capture=query_record["record_id"], min_score=0.5, checkpoint=query_record["checkpoint_id"])
    assert {i["checkpoint_id"] for i in at.json()["items"]} == {query_record["checkpoint_id"]}
    limited = site.search(capture=query_record["record_id"], min_score=0.5, limit=3).json()
    assert len(limited["items"]) == 3 and limited["matched"] >= 30


def test_a_search_is_audited_with_its_reason_and_subject(site: Site) -> None:
    record_id = site.data.records[site.data.people[2][0]]["record_id"]
    reason = f"case audit-face-{uuid.uuid4().hex[:6]}"
    assert site.search(capture=record_id, reason=reason).status_code == 200
    events = [value for _key, value in read_topic(site.backing.broker.bootstrap, TOPICS.audit)
              if isinstance(value, dict) and value.get("reason") == reason]
    assert len(events) == 1
    assert events[0]["action"] == "captures.face_search" and events[0]["target"] == record_id
    assert events[0]["user"] == "viewer" and events[0]["query"]["min_score"] == DEFAULT_MIN_SCORE


def test_the_follower_indexes_new_bus_records_and_sets_bad_ones_aside(site: Site) -> None:
    viewer = site.console.client("viewer")
    before = viewer.get("/api/v1/captures/faces/status").json()
    person = site.data.people[3]
    base = site.data.records[person[0]]
    now = datetime.now(CITY_TZ)
    fresh = [{**base, "record_id": f"bus-{uuid.uuid4().hex[:8]}-{n}", "capture_time": format_time(now - timedelta(
        minutes=n + 1))} for n in range(3)]
    unrecognized = {**base, "record_id": "bus-unrecognized", "feature": UNRECOGNIZED}
    duplicate = site.data.records[5]  # already in HBase: the overlap of scan and follow
    values = [encode(r) for r in fresh] + [encode(unrecognized), encode(duplicate), b"{not json",
                                           json.dumps({"hello": "a foreign record"}).encode(),
                                           encode({**base, "record_id": "bus-bad", "feature": "AAAA"})]
    send(site.backing.broker.bootstrap, site.topic, values, [r["checkpoint_id"] for r in fresh] + ["k"] * 5)
    deadline = time.monotonic() + 30
    while True:
        status = viewer.get("/api/v1/captures/faces/status").json()
        if status["faces"] >= before["faces"] + 3 and status["set_aside"] >= before["set_aside"] + 3:
            break
        assert time.monotonic() < deadline, status
        time.sleep(0.2)
    time.sleep(1)  # anything else the follower would (wrongly) index has arrived by now
    status = viewer.get("/api/v1/captures/faces/status").json()
    assert status["faces"] == before["faces"] + 3 and status["set_aside"] == before["set_aside"] + 3
    end_ms = epoch_ms(format_time(now)) + 1
    response = site.search(capture=base["record_id"], to=format_time(datetime.fromtimestamp(end_ms / 1000, CITY_TZ)),
                           limit=1000)
    found = set(ids(response))
    assert {r["record_id"] for r in fresh} <= found and "bus-unrecognized" not in found
    metrics = httpx.get(f"{site.console.url}/metrics").text
    assert 'reader="face-search"' in metrics


def test_a_restart_rebuilds_the_index_from_hbase_and_the_bus(site: Site) -> None:
    """The index lives in memory: a new console (a restart after a crash) builds it again, and the follow margin
    re-reads what only the bus holds (the records no ingest job wrote to HBase here)."""
    query = site.data.records[site.data.people[0][0]]["record_id"]
    before = ids(site.search(capture=query, limit=1000))
    faces_before = site.console.client("viewer").get("/api/v1/captures/faces/status").json()["faces"]
    again = start_face_console(site.backing, site.topic)
    try:
        rebuilt = wait_ready(again.client("viewer"))
        deadline = time.monotonic() + 20
        while rebuilt["faces"] < faces_before and time.monotonic() < deadline:
            time.sleep(0.2)
            rebuilt = again.client("viewer").get("/api/v1/captures/faces/status").json()
        assert rebuilt["faces"] == faces_before
        site_again = Site(again, site.data, site.topic, site.backing, site.start_ms, site.end_ms, rebuilt)
        assert ids(site_again.search(capture=query, limit=1000)) == before
    finally:
        again.stop()


def test_until_the_index_is_built_the_search_answers_503_with_retry_after() -> None:
    """In process, the app's lifespan not run, so its index never starts building (a real console builds 20,000
    faces in about a second: too quickly to catch it building, and slowing one down would cost CI a console)."""
    from fastapi.testclient import TestClient  # here: importing it warns, and the benchmark imports this module

    app = create_app(ConsoleSettings())
    viewer = ViewerDep.__metadata__[0].dependency
    app.dependency_overrides[viewer] = lambda: UserOut(username="viewer", role=Role.VIEWER)
    client = TestClient(app)
    body = {"capture": "fs-1", "from": "2026-11-01T00:00:00+08:00", "to": "2026-11-02T00:00:00+08:00",
            "reason": REASON}
    response = client.post("/api/v1/captures/faces/similar", json=body)
    assert response.status_code == 503, response.text
    assert response.headers["Retry-After"] == "5"
    assert response.json()["backend"] == "face_index" and response.json()["progress"]["ready"] is False
    assert client.get("/api/v1/captures/faces/status").json()["ready"] is False
    bad = client.post("/api/v1/captures/faces/similar", json={**body, "limit": 0})
    assert bad.status_code == 422  # a mistake is still a mistake while building


BAD_INPUTS = [
    ({"feature": base64.b64encode(b"\0" * 508).decode()}, "feature"),  # 127 components
    ({"feature": encode_feature([1.0] * 128)}, "feature"),  # not normalised
    ({"feature": "not base64!"}, "feature"),
    ({"capture": "fs-1", "min_score": 1.5}, "min_score"),
    ({"capture": "fs-1", "min_score": -0.1}, "min_score"),
    ({"capture": "fs-1", "limit": 0}, "limit"),
    ({"capture": "fs-1", "limit": 1001}, "limit"),
    ({}, "capture"),
    ({"capture": "fs-1", "feature": encode_feature([1.0] + [0.0] * 127)}, "feature"),
    ({"capture": "fs-1", "to": "2026-01-01T00:00:00+08:00", "from": "2025-01-01T00:00:00+08:00"}, "to"),
    ({"capture": "fs-1", "to": "2026-01-01T00:00:00+08:00", "from": "2026-01-02T00:00:00+08:00"}, "to"),
    ({"capture": "fs-1", "district": "999999"}, "district"),
    ({"capture": "fs-1", "checkpoint": "330102#99#0#0"}, "checkpoint"),
    ({"capture": "fs-1", "checkpoint": "nonsense"}, "checkpoint"),
    ({"capture": "fs-1", "from": "2026-01-01T00:00:00"}, "from"),  # no offset
    ({"capture": "fs-1", "reason": ""}, "reason"),
]


@pytest.mark.parametrize(("body", "field"), BAD_INPUTS)
def test_bad_input_is_a_422_naming_the_field(site: Site, body: dict[str, Any], field: str) -> None:
    response = site.search(**body)
    assert response.status_code == 422, response.text
    assert field in {str(part) for d in response.json()["detail"] for part in d["loc"]}, response.text


def test_an_unknown_capture_is_404_and_watching_needs_an_operator(site: Site) -> None:
    assert site.search(capture="no-such-capture").status_code == 404
    watch = {"kind": "face", "capture": site.data.records[0]["record_id"]}
    assert site.console.client("viewer").post("/api/v1/watchlist", json=watch).status_code == 403


@pytest.mark.parametrize(("key", "value"), [("face_search_max_days", 0), ("face_search_max_days", 1.5),
                                            ("face_search_min_score", 1.2), ("face_search_follow_margin_s", -1)])
def test_the_console_refuses_a_face_search_setting_it_cannot_use(tmp_path: Path, key: str, value: float) -> None:
    path = tmp_path / "solution.toml"
    path.write_text(f"[console]\n{key} = {value}\n")
    with pytest.raises(ValueError, match=f"console.{key}"):
        ConsoleSettings.from_config(load_config(path))
