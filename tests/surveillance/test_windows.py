"""Tumbling event-time windows (pure logic): counts against an independent tally, lateness, partials.

Captures go through stage A's router into stage B's windows, as the two statistics stages do over the
repartition topic."""

from __future__ import annotations

import json
import random
from collections import defaultdict
from typing import Any

import pytest

from contracts.records import UNRECOGNIZED, Kind
from contracts.surveillance import stat_from_json
from surveillance.geo import district_of
from surveillance.stats_events import Router
from surveillance.windows import Windows, iso

T0 = 1_800_000_000_000 - 1_800_000_000_000 % 60_000   # a whole minute
CHECKPOINTS = ("330106#1#0#0", "330106#2#1#0", "330109#1#0#0", "330110#3#2#0")


def stat(measure: str, group_by: str, window_s: int = 10, **extra: Any) -> Any:
    stat_id = f"{measure}-{group_by}" + ("-filtered" if "filter" in extra else "")
    return stat_from_json({"stat_id": stat_id, "measure": measure, "group_by": group_by,
                           "window_s": window_s, **extra})


def vehicle(n: int, checkpoint: str, plate: str, speed: float, vehicle_type: str = "car") -> dict[str, Any]:
    return {"record_id": f"r{n}", "checkpoint_id": checkpoint, "plate_number": plate, "speed_kmh": speed,
            "vehicle_type": vehicle_type}


class Pipeline:
    """Stage A's router feeding stage B's windows (each capture's events, in order)."""

    def __init__(self, lateness_s: float, sources: tuple[str, ...] = ()) -> None:
        self.router = Router(district_of)
        self.windows = Windows(lateness_s, 1.0, sources)
        self.offset = 0

    def apply(self, stat_id: str, command: Any) -> None:
        self.router.apply(stat_id, command)
        self.windows.apply(stat_id, command)

    def add(self, kind: Kind, record: dict[str, Any], t: int, source: Any = None) -> list[str]:
        """Route and fold one capture (read from ``source``); the ids of the statistics that found it late."""
        self.offset += 1
        events = self.router.route(kind, record, t, "capture", 0, self.offset)
        return [e.stat_id for e in events if not self.windows.add(e, source)]

    def advance(self, t: int) -> None:
        """Every source has moved on to ``t`` (stage A's progress marks)."""
        for source in list(self.windows.sources):
            self.windows.progress(source, t)


def windows(*commands: Any, lateness_s: float = 2.0, sources: tuple[str, ...] = ()) -> Pipeline:
    w = Pipeline(lateness_s, sources)
    for command in commands:
        w.apply(command.stat_id, command)
    return w


def finals(results: list[Any]) -> dict[tuple[str, int, str], Any]:
    return {(r.stat_id, r.window_start_ms, r.group): r.value for r in results if r.final}


def test_every_measure_and_grouping_equals_an_independent_tally() -> None:
    rng = random.Random(3)
    records = []
    for n in range(3000):   # 300 s of traffic, shuffled by up to 1.5 s (inside the 2 s lateness)
        t = T0 + n * 100 + rng.randrange(1500)
        plate = UNRECOGNIZED if rng.random() < 0.05 else f"浙A{rng.randrange(40):05d}"
        records.append((t, vehicle(n, rng.choice(CHECKPOINTS), plate, round(rng.uniform(10, 80), 1),
                                   rng.choice(("car", "suv")))))
    commands = [stat(m, g) for m in ("vehicle_count", "distinct_plates", "avg_speed")
                for g in ("checkpoint", "district", "city")] + [stat("vehicle_count", "city", 30,
                                                                     filter={"vehicle_type": "suv"})]
    w = windows(*commands)
    out = []
    for t, record in records:
        assert w.add(Kind.VEHICLE, record, t) == []
        out += w.windows.close()
    w.advance(T0 + 10**7)
    out += w.windows.close()
    got = finals(out)

    expected: dict[tuple[str, int, str], Any] = {}
    for command in commands:
        size = command.window_s * 1000
        cells: dict[tuple[int, str], list[dict[str, Any]]] = defaultdict(list)
        for t, record in records:
            if command.matches(record):
                group = {"checkpoint": record["checkpoint_id"], "district": record["checkpoint_id"][:6],
                         "city": "city"}[command.group_by]
                cells[(t // size * size, group)].append(record)
        for (start, group), members in cells.items():
            value: Any = len(members)
            if command.measure == "distinct_plates":
                value = len({r["plate_number"] for r in members} - {UNRECOGNIZED})
            elif command.measure == "avg_speed":
                value = round(sum(r["speed_kmh"] for r in members) / len(members), 2)
            expected[(command.stat_id, start, group)] = value
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        assert got[key] == pytest.approx(value, abs=0.006), key
    assert len([r for r in out if r.final]) == len(expected)   # one final per window and group


def test_late_records_are_counted_not_folded_into_a_final() -> None:
    w = windows(stat("vehicle_count", "city"), lateness_s=2)
    w.add(Kind.VEHICLE, vehicle(1, CHECKPOINTS[0], "浙A00001", 40), T0 + 1_000)
    assert w.windows.close() == []
    w.add(Kind.VEHICLE, vehicle(2, CHECKPOINTS[0], "浙A00002", 40), T0 + 11_500)   # window 0 still open
    w.add(Kind.VEHICLE, vehicle(3, CHECKPOINTS[0], "浙A00003", 40), T0 + 9_000)    # 2.5 s late: within lateness
    assert w.windows.close() == []
    w.add(Kind.VEHICLE, vehicle(4, CHECKPOINTS[0], "浙A00004", 40), T0 + 12_000)   # stream time: end + lateness
    [final] = w.windows.close()
    assert (final.window_start_ms, final.value, final.final, final.late_records) == (T0, 2, True, 0)
    assert w.add(Kind.VEHICLE, vehicle(5, CHECKPOINTS[0], "浙A00005", 40), T0 + 9_999) == ["vehicle_count-city"]
    w.advance(T0 + 22_000)
    [second] = w.windows.close()
    assert (second.window_start_ms, second.value, second.late_records) == (T0 + 10_000, 2, 1)
    assert second.to_json()["window_start"] == iso(T0 + 10_000)
    assert second.to_json()["window_end"].endswith("+08:00")


def test_partials_are_rate_limited_per_group() -> None:
    w = windows(stat("vehicle_count", "checkpoint"))
    w.add(Kind.VEHICLE, vehicle(1, CHECKPOINTS[0], "浙A00001", 40), T0)
    w.add(Kind.VEHICLE, vehicle(2, CHECKPOINTS[1], "浙A00002", 40), T0)
    first = sorted((r.group, r.value, r.final) for r in w.windows.partials(100.0))
    assert first == [(CHECKPOINTS[0], 1, False), (CHECKPOINTS[1], 1, False)]
    assert w.windows.partials(100.5) == []                                   # nothing changed
    w.add(Kind.VEHICLE, vehicle(3, CHECKPOINTS[0], "浙A00003", 40), T0 + 1)
    assert w.windows.partials(100.5) == []                                   # changed, but within the second
    assert [(r.group, r.value) for r in w.windows.partials(101.0)] == [(CHECKPOINTS[0], 2)]


def test_kinds_requested_at_stop_and_restart() -> None:
    faces = stat("face_count", "city", requested_at=iso(T0 + 5_000))
    w = windows(faces, stat("vehicle_count", "city"))
    w.add(Kind.FACE, {"checkpoint_id": CHECKPOINTS[0]}, T0 + 4_000)   # before the statistic was asked for
    w.add(Kind.FACE, {"checkpoint_id": CHECKPOINTS[0]}, T0 + 6_000)
    w.add(Kind.VEHICLE, vehicle(1, CHECKPOINTS[0], "浙A00001", 40), T0 + 6_000)
    assert w.windows.longest_window_ms() == 10_000
    w.advance(T0 + 20_000)
    got = sorted((r.stat_id, r.value) for r in w.windows.close())
    assert got == [("face_count-city", 1), ("vehicle_count-city", 1)]
    w.apply("face_count-city", None)                                 # stopped: nothing more
    w.add(Kind.FACE, {"checkpoint_id": CHECKPOINTS[0]}, T0 + 21_000)
    w.advance(T0 + 40_000)
    assert w.windows.close() == []
    w.apply("vehicle_count-city", stat("vehicle_count", "city", window_s=60))   # redefined: fresh windows
    assert w.windows.stats["vehicle_count-city"].window_ms == 60_000


def test_avg_speed_of_a_window_without_speeds_is_none() -> None:
    w = windows(stat("avg_speed", "city"))
    w.add(Kind.VEHICLE, {"checkpoint_id": CHECKPOINTS[0], "speed_kmh": "fast"}, T0)
    w.advance(T0 + 60_000)
    [result] = w.windows.close()
    assert (result.value, result.count) == (None, 1)
    assert json.loads(json.dumps(result.to_json(), allow_nan=False)) == result.to_json()   # plain JSON


def test_a_partition_behind_holds_stream_time_until_it_progresses() -> None:
    """A consumer catching up reads one partition's backlog before another's: neither is late. A partition
    that delivers nothing (its owner died) holds the windows open until it moves on."""
    w = windows(stat("vehicle_count", "city"), lateness_s=2, sources=("p0", "p1"))
    for n in range(60):                      # partition 0: a minute of traffic at once
        assert w.add(Kind.VEHICLE, vehicle(n, CHECKPOINTS[0], "浙A00001", 40), T0 + n * 1000, "p0") == []
    assert w.windows.close() == [] and w.windows.stream_ms == 0
    for n in range(60):                      # partition 1: the same minute, read a moment later
        assert w.add(Kind.VEHICLE, vehicle(n, CHECKPOINTS[1], "浙A00001", 40), T0 + n * 1000, "p1") == []
    assert sorted(r.value for r in w.windows.close()) == [20] * 5   # both partitions in every closed window
    # p1 stops delivering: p0 runs on for minutes, and p1's backlog, when it comes, is on time.
    w.add(Kind.VEHICLE, vehicle(200, CHECKPOINTS[0], "浙A00001", 40), T0 + 300_000, "p0")
    assert w.windows.stream_ms == T0 + 59_000
    assert w.add(Kind.VEHICLE, vehicle(201, CHECKPOINTS[1], "浙A00001", 40), T0 + 59_500, "p1") == []
    w.windows.progress("p1", T0 + 200_000)                # p1's progress mark: everything up to there is in
    assert w.windows.stream_ms == T0 + 200_000
    assert sorted(r.value for r in w.windows.close()) == [21]   # the last window of the minute, with 201
    assert w.add(Kind.VEHICLE, vehicle(202, CHECKPOINTS[1], "浙A00001", 40), T0 + 61_000, "p1") != []
