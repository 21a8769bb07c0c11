"""The city simulator is deterministic, realistic enough, and only ever emits what it says it does."""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime
from pathlib import Path

import pytest

from contracts import records
from contracts.records import Kind, Status
from contracts.topics import Topics
from ingest.city import build_city
from ingest.simulate import Simulator, StatusLine
from ingest.traffic import Traffic, TrafficConfig, daily_factor

FIXED = datetime(2026, 11, 22, 8, 0, 0, 123000, tzinfo=records.CITY_TZ)


def traffic(seed: int = 7, checkpoints: int = 24, **config: object) -> Traffic:
    return Traffic(build_city(seed, checkpoints), TrafficConfig(seed=seed, **config), clock=lambda: FIXED)


def stream(t: Traffic, ticks: int = 20, per_tick: int = 100, step_s: float = 30.0) -> list:
    return [e for i in range(ticks) for e in t.records(per_tick, i * step_s)]


def test_same_seed_same_records() -> None:
    a = stream(traffic(seed=7, speedup=60.0, malformed_rate=0.01))
    b = stream(traffic(seed=7, speedup=60.0, malformed_rate=0.01))
    assert [(e.kind, e.key, e.value) for e in a] == [(e.kind, e.key, e.value) for e in b]
    c = stream(traffic(seed=8, speedup=60.0, malformed_rate=0.01))
    assert [e.value for e in a] != [e.value for e in c]


def test_city_is_deterministic_and_saved_as_json(tmp_path: Path) -> None:
    city = build_city(3, 30)
    assert city.deployment_map() == build_city(3, 30).deployment_map()
    city.save(tmp_path / "map.json")
    saved = json.loads((tmp_path / "map.json").read_text())
    assert len(saved["checkpoints"]) == 30
    assert {c["checkpoint_id"] for c in saved["checkpoints"]} == {c.checkpoint_id for c in city.checkpoints}
    served = [ip for r in saved["recognizers"] for ip in r["devices"]]
    assert sorted(served) == sorted(d["device_ip"] for d in saved["devices"])  # every device served once
    for checkpoint in saved["checkpoints"]:
        assert records._CHECKPOINT_ID.fullmatch(checkpoint["checkpoint_id"])


def test_every_record_is_what_it_claims_to_be() -> None:
    emitted = stream(traffic(malformed_rate=0.02, failure_rate=0.05))
    outcomes = Counter()
    for e in emitted:
        checked = records.parse(e.kind, e.value)
        expected = Status.INVALID if e.malformed else Status.UNRECOGNIZED if e.unrecognized else Status.VALID
        assert checked.status is expected, (e, checked.reason)
        if checked.record is not None:
            assert e.key == checked.record["checkpoint_id"].encode()
            assert checked.record["capture_time"] == "2026-11-22T08:00:00.123+08:00"
        outcomes[checked.status] += 1
    assert outcomes[Status.VALID] > outcomes[Status.UNRECOGNIZED] > outcomes[Status.INVALID] > 0
    ids = [json.loads(e.value)["record_id"] for e in emitted if not e.malformed]
    assert len(ids) == len(set(ids))  # record ids are unique (device + sequence)


def test_mix_of_kinds_provinces_and_faces() -> None:
    records = [json.loads(e.value) for e in stream(traffic(face_share=0.3, failure_rate=0.0))]
    faces = [r for r in records if "feature" in r]
    assert 0.2 < len(faces) / len(records) < 0.4
    provinces = Counter(r["plate_number"][0] for r in records if "plate_number" in r)
    assert provinces.most_common(1)[0][0] == "浙" and len(provinces) > 3


def test_rush_hours_and_night() -> None:
    assert daily_factor(8.0) > 2.0 and daily_factor(18.0) > 2.0
    assert daily_factor(3.0) < 0.3 and daily_factor(12.5) < daily_factor(8.0)
    mean = sum(daily_factor(h / 10) for h in range(240)) / 240
    assert mean == pytest.approx(1.0, abs=0.02)
    t = traffic(speedup=3600.0, start_hour=0.0)
    assert t.rate_factor(8.0) > 5 * t.rate_factor(3.0)  # 8 s at 3600x is 08:00
    assert traffic(curve="flat").rate_factor(8.0) == 1.0


def test_failing_devices() -> None:
    t = traffic(checkpoints=40)
    modes = Counter(f.mode for f in t.failures.values())
    assert set(modes) == {"blurred", "blocked", "offline"}
    first = next(f for f in t.failures.values() if f.start_s == 0.0)
    assert t.device_state(first.device_ip, 0.0) == first.mode
    assert t.device_state(first.device_ip, first.end_s + 1) == "ok"
    for failure in t.failures.values():
        during = failure.start_s + 1  # speedup 1: simulated seconds are elapsed seconds
        emitted = t.records(3000, during)
        mine = [e for e in emitted if e.device_ip == failure.device_ip]
        if failure.mode == "blurred":
            assert sum(e.unrecognized for e in mine) > 0.5 * len(mine) > 0
        else:
            assert not mine  # blocked and offline devices capture nothing


def test_targets_recur_along_their_routes() -> None:
    t = traffic(target_every=10, target_plates=2, target_faces=1)
    records = [json.loads(e.value) for e in t.records(3000, 0.0)]
    for target in (x for x in t.targets if x.plate):
        sightings = [r["checkpoint_id"] for r in records if r.get("plate_number") == target.plate]
        assert len(sightings) >= 50
        assert set(sightings) <= set(target.route)
        assert sightings[: len(target.route)] == target.route[: len(sightings)]  # in route order
    face_target = next(x for x in t.targets if x.identity)
    same = [r for r in records if "feature" in r and r["checkpoint_id"] in face_target.route]
    similar = [r for r in same if _cosine(r["feature"], face_target.identity) > 0.9]
    assert len(similar) >= 50


def _cosine(feature: str, identity: list[float]) -> float:
    return sum(a * b for a, b in zip(records.decode_feature(feature), identity, strict=True))


class FakeProducer:
    """Acknowledges everything at once: the simulator's counting, without a broker."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes, bytes]] = []

    def ensure_topics(self, partitions: dict, timeout: float = 15.0) -> None:
        pass

    def produce(self, topic: str, key: bytes, value: bytes, on_delivery) -> None:
        self.sent.append((topic, key, value))
        on_delivery(None)

    def poll(self, timeout: float = 0.0) -> None:
        pass

    def flush(self, timeout: float) -> int:
        return 0


def test_simulator_counts_what_was_acknowledged(tmp_path: Path) -> None:
    producer = FakeProducer()
    t = traffic(malformed_rate=0.01)
    sim = Simulator(t, producer, Topics(), rate=20_000, heartbeat_s=0.05)
    with (tmp_path / "status").open("w") as out:
        elapsed = sim.run(count=2000, duration=30, status=StatusLine(out, interval=0.01))
    summary = sim.summary(elapsed, seed=7)
    assert sum(summary["produced"].values()) == 2000
    captures = [s for s in producer.sent if s[0] != "device.heartbeat"]
    assert len(captures) == 2000
    assert summary["unrecognized"]["capture.vehicle"] == sum(
        records.parse(Kind.VEHICLE, v).status is Status.UNRECOGNIZED
        for tp, _, v in captures if tp == "capture.vehicle")
    beats = [json.loads(v) for tp, _, v in producer.sent if tp == "device.heartbeat"]
    assert summary["heartbeats"] == len(beats) > 0
    offline = {ip for ip, f in t.failures.items() if f.mode == "offline" and f.active(0.0)}
    assert not offline & {b["device_ip"] for b in beats}
    last = {b["device_ip"]: b for b in beats}
    assert sum(b["produced"] for b in last.values()) == 2000  # the final heartbeats carry every record
    json.dumps(summary)
