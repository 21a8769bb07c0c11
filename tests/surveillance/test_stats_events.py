"""The statistics' repartition topic (pure logic): routing, the record format, replay de-duplication,
progress marks, and stage B folding only the definition an event was routed for."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from contracts.config import Config
from contracts.deployment_map import DeploymentMap
from contracts.records import UNRECOGNIZED, Kind, encode
from contracts.surveillance import stat_from_json
from surveillance.geo import Geo, district_of
from surveillance.settings import Settings
from surveillance.stats_events import Dedup, Progress, Router, StatEvent, parse_record, version
from surveillance.stats_stage import StatsRepartition
from surveillance.stats_windows_stage import WindowedStats

T0 = 1_800_000_000_000 - 1_800_000_000_000 % 60_000
CP = "330106#1#0#0"
SETTINGS = Settings.from_config(Config({"surveillance": {"instance": "test", "allowed_lateness_s": 2}},
                                       Path("test.toml")))


def stat(stat_id: str, measure: str, group_by: str, **extra: Any) -> Any:
    return stat_from_json({"stat_id": stat_id, "measure": measure, "group_by": group_by, "window_s": 10, **extra})


def event(stat_id: str, digest: str, ms: int, offset: int, index: int = 0, partition: int = 0) -> StatEvent:
    return StatEvent(stat_id, digest, "city", ms, None, None, ("capture.vehicle", partition, offset, index))


def test_a_capture_becomes_one_event_per_statistic_that_counts_it() -> None:
    router = Router(district_of)
    commands = [stat("plates", "distinct_plates", "district"), stat("speed", "avg_speed", "city"),
                stat("suv", "vehicle_count", "checkpoint", filter={"vehicle_type": "suv"}),
                stat("faces", "face_count", "city"),
                stat("later", "vehicle_count", "city", requested_at="2027-01-16T08:00:00.000+08:00")]
    for command in commands:
        router.apply(command.stat_id, command)
    car = {"checkpoint_id": CP, "plate_number": "浙A12345", "speed_kmh": 52.5, "vehicle_type": "car"}
    events = router.route(Kind.VEHICLE, car, T0, "capture.vehicle", 1, 77)
    assert [(e.stat_id, e.group, e.plate, e.speed_kmh, e.source) for e in events] == [
        ("plates", "330106", "浙A12345", None, ("capture.vehicle", 1, 77, 0)),
        ("speed", "city", None, 52.5, ("capture.vehicle", 1, 77, 1))]
    assert events[0].key == b"plates|330106" and events[0].version == version(commands[0])
    unread = {**car, "plate_number": UNRECOGNIZED, "speed_kmh": UNRECOGNIZED, "vehicle_type": "suv"}
    events = router.route(Kind.VEHICLE, unread, T0, "capture.vehicle", 1, 78)
    assert [(e.stat_id, e.group, e.plate, e.speed_kmh) for e in events] == [
        ("plates", "330106", None, None), ("speed", "city", None, None), ("suv", CP, None, None)]
    assert [e.stat_id for e in router.route(Kind.FACE, {"checkpoint_id": CP}, T0, "capture.face", 0, 1)] == ["faces"]
    router.apply("speed", None)
    assert [e.stat_id for e in router.route(Kind.VEHICLE, car, T0, "capture.vehicle", 1, 79)] == ["plates"]


def test_events_round_trip_and_anything_else_is_refused() -> None:
    original = StatEvent("s1", "abc", "330106", T0, "浙A12345", 40.5, ("capture.vehicle", 3, 12, 1))
    assert parse_record(original.encode()) == original
    mark = Progress(("capture.face", 2), T0)
    assert parse_record(mark.encode()) == mark
    good = {"stat_id": "s1", "version": "abc", "group": "city", "capture_ms": T0, "plate": None, "speed_kmh": None,
            "source": ["capture.vehicle", 0, 1, 0]}
    assert parse_record(encode(good)).group == "city"
    bad = [None, b"[]", b"{", encode({**good, "group": ""}), encode({**good, "capture_ms": "noon"}),
           encode({**good, "source": ["capture.vehicle", 0, 1]}), encode({**good, "speed_kmh": True}),
           encode({**good, "plate": 5}), encode({k: v for k, v in good.items() if k != "version"}),
           encode({"progress": ["capture.face"], "capture_ms": T0}), encode({"progress": ["t", 0], "capture_ms": "x"})]
    for raw in bad:
        with pytest.raises((ValueError, KeyError, TypeError)):
            parse_record(raw)


def test_a_replayed_capture_partition_is_dropped() -> None:
    dedup = Dedup()
    first = [event("s", "v", T0, offset, index) for offset in range(10, 15) for index in range(2)]
    assert [dedup.duplicate(e) for e in first] == [False] * 10
    # stage A crashed after publishing offset 14 and committing 12: the next owner publishes 12.. again
    replay = [event("s", "v", T0, offset, index) for offset in range(12, 17) for index in range(2)]
    assert [dedup.duplicate(e) for e in replay] == [True] * 6 + [False] * 4
    assert not dedup.duplicate(event("s", "v", T0, 3, partition=1))      # another capture partition


class Refresh:
    """Stands in for reading control.stats to its end: applies what was 'published' since."""

    def __init__(self, stage: WindowedStats) -> None:
        self.stage, self.published, self.calls = stage, [], 0

    def __call__(self) -> None:
        self.calls += 1
        for key, value in self.published:
            self.stage.apply(key, value)
        self.published.clear()


def test_stage_b_folds_an_event_only_into_the_definition_it_was_routed_for() -> None:
    stage = WindowedStats(SETTINGS)
    windows = stage.state(("surveillance.stat-events", 0)).windows
    refresh = stage.refresh = Refresh(stage)
    ten = {"stat_id": "s1", "measure": "vehicle_count", "group_by": "city", "window_s": 10}
    new = stat("s1", "vehicle_count", "city")
    refresh.published.append((b"s1", encode(ten)))     # stage A read it first: the event arrives before it
    assert stage.known(windows, event("s1", version(new), T0, 1)) and refresh.calls == 1
    assert stage.known(windows, event("s1", version(new), T0, 2)) and refresh.calls == 1
    stage.apply(b"s1", encode({**ten, "window_s": 20}))           # redefined: events in flight are stale
    assert not stage.known(windows, event("s1", version(new), T0, 3)) and refresh.calls == 2
    assert not stage.known(windows, event("s1", version(new), T0, 4)) and refresh.calls == 2   # remembered
    stage.apply(b"s1", None)
    assert not stage.known(windows, event("s1", version(stat("s1", "vehicle_count", "city", window_s=20)), T0, 5))
    assert stage.state(("surveillance.stat-events", 1)).windows.stats == {}


def test_stage_b_closes_a_window_once_every_capture_partition_has_moved_past_it() -> None:
    stage = WindowedStats(SETTINGS)
    stage.capture_partitions = [("capture.vehicle", 0), ("capture.vehicle", 1)]
    command = stat("s1", "vehicle_count", "district")
    stage.apply(b"s1", encode(command.to_json()))
    state = stage.state(("surveillance.stat-events", 0))
    digest = version(command)

    def fold(record: StatEvent | Progress) -> list[tuple[str, int, int]]:
        assert stage.fold(state, record, replaying=False)
        return [(r.group, r.value, r.late_records) for r in state.windows.close()]

    offsets = itertools.count(100)

    def add(group: str, ms: int, partition: int = 0) -> list[tuple[str, int, int]]:
        source = ("capture.vehicle", partition, next(offsets), 0)
        return fold(StatEvent("s1", digest, group, ms, None, None, source))

    assert add("a", T0) == [] and add("b", T0 + 12_000) == []     # partition 1 has not moved yet
    assert fold(Progress(("capture.vehicle", 1), T0 + 11_999)) == []
    assert fold(Progress(("capture.vehicle", 1), T0 + 12_000)) == [("a", 1, 0)]   # end + lateness
    assert add("a", T0 + 1, 1) == [] and add("a", T0 + 2, 1) == [] and add("b", T0 + 3) == []   # late
    assert fold(Progress(("capture.vehicle", 0), T0 + 30_000)) == []
    assert fold(Progress(("capture.vehicle", 1), T0 + 30_000)) == [("b", 1, 1)]   # late per group
    assert state.windows.stats["s1"].late == {"a": 2, "b": 1}
    assert not stage.fold(state, StatEvent("s1", digest, "a", T0, None, None, ("capture.vehicle", 1, 2, 0)),
                          replaying=False)                         # a replayed duplicate


def test_stage_a_marks_each_owned_capture_partition_to_every_event_partition_when_it_moves() -> None:
    stage = StatsRepartition(SETTINGS, Geo(DeploymentMap((), (), (), ())), event_partitions=3)
    stage.assigned([TopicPartition("capture.vehicle", 0), TopicPartition("capture.face", 1)])
    assert stage.tick() == []                                      # nothing read yet
    stage.newest[("capture.vehicle", 0)] = T0
    assert stage.tick() == []                                      # at most one round per MARK_INTERVAL_S
    stage.next_mark = 0.0
    marks = stage.tick()
    assert [(m.key, m.partition, parse_record(m.value)) for m in marks] == [
        (None, p, Progress(("capture.vehicle", 0), T0)) for p in range(3)]
    stage.next_mark = 0.0
    assert stage.tick() == []                                      # it has not moved since
    stage.revoked([])
    assert stage.newest == {} and stage.tick() == []
