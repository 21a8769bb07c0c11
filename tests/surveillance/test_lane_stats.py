"""Statistics grouped by lane (issue 29 part 3): the command's checks, the routing, and the service end to end.

A lane's group is ``<checkpoint id>/lane-<n>`` (lane numbers restart on every checkpoint). End to end, every
final is compared with a tally computed here from the records the test published; late records are counted
on the lane's results (a kill -9 with a lane window open: `test_stats.py`, parametrized by grouping). The bad
commands the issue names (a lane the checkpoint lacks, a checkpoint that does not exist, lanes of face captures) are
rejected with a reply naming the field, by the contract alone where it can judge and against the map where
it cannot.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from contracts.commands import CommandError
from contracts.config import Config
from contracts.deployment_map import DeploymentMap
from contracts.records import UNRECOGNIZED, Kind, encode
from contracts.surveillance import lane_group, parse_lane_group, stat_from_json
from ingest import values
from surveillance.geo import Geo, district_of
from surveillance.settings import Settings
from surveillance.stats_events import Router, read_command
from surveillance.stats_stage import StatsRepartition, map_lanes
from surveillance.stats_windows_stage import WindowedStats
from testkit.surveillance import CHECKPOINTS, capture_time, city_map, face, vehicle
from tests.surveillance._support import Site
from tests.surveillance._support_stats import T, finals, stat, tally

MAP_LANES = {c.checkpoint_id: c.lanes for c in city_map().checkpoints}
"""The test city's checkpoints have two lanes each."""
NOWHERE = "330102#9#0#0"
"""A well-formed checkpoint id the map does not have."""
SETTINGS = Settings.from_config(Config({"surveillance": {"instance": "test"}, "map": {"path": "/nonexistent"}},
                                       Path("test.toml")))


def command(measure: str = "vehicle_count", group_by: str = "lane", **extra: Any) -> dict[str, Any]:
    return {"stat_id": "s", "measure": measure, "group_by": group_by, "window_s": 10, **extra}


def refusal(value: dict[str, Any], lanes: dict[str, int] | None = MAP_LANES) -> str:
    """The field a command is refused for."""
    with pytest.raises(CommandError) as caught:
        stat_from_json(value, lanes=lanes)
    return caught.value.field


def test_a_lane_key_names_its_checkpoint_and_reads_back() -> None:
    assert lane_group("330102#1#0#0", 3) == "330102#1#0#0/lane-3"
    assert parse_lane_group("330102#1#0#0/lane-3") == ("330102#1#0#0", 3)
    for other in ("330102#1#0#0", "330102", "city", "330102#1#0#0/lane-x", "x/lane-1", "330102#1#0#0/lane-1/lane-2"):
        assert parse_lane_group(other) is None, other


def test_lane_commands_are_checked_for_their_shape_and_against_the_map() -> None:
    cp = CHECKPOINTS[0]
    for good in (command(), command("avg_speed", filter={"checkpoint_id": cp}),
                 command("distinct_plates", filter={"checkpoint_id": cp, "lane": 2}), command(filter={"lane": 1})):
        assert stat_from_json(good, lanes=MAP_LANES).group_by == "lane"
    # Face captures have no lane: refused naming group_by (and a lane filter on faces names the filter).
    assert refusal(command("face_count")) == "group_by"
    assert refusal(command("face_count", "city", filter={"lane": 1})) == "filter"
    # A lane the checkpoint does not have, or no checkpoint has; a checkpoint the map does not have.
    assert refusal(command(filter={"checkpoint_id": cp, "lane": 3})) == "filter.lane"
    assert refusal(command(filter={"lane": 3})) == "filter.lane"
    assert refusal(command("vehicle_count", "district", filter={"checkpoint_id": NOWHERE})) == "filter.checkpoint_id"
    # Shapes are refused even without a map: a lane is a number from 1, a checkpoint an id.
    for lane in ("2", 0, -1, 1.5, True):
        assert refusal(command(filter={"lane": lane}), lanes=None) == "filter.lane", lane
    assert refusal(command(filter={"checkpoint_id": "gate 4"}), lanes=None) == "filter.checkpoint_id"
    # Without a map only the shape is judged (a service without its map still counts).
    assert stat_from_json(command(filter={"checkpoint_id": NOWHERE, "lane": 7})).filter == (
        ("checkpoint_id", NOWHERE), ("lane", 7))
    with pytest.raises(CommandError, match=r"^group_by: unknown group_by 'street': lane, checkpoint, district"):
        stat_from_json(command(group_by="street"))


def test_a_capture_counts_in_its_checkpoints_lane() -> None:
    router = Router(district_of)
    for stat_id, value in (("by-lane", command()), ("lane-2", command(filter={"lane": 2})),
                           ("by-cp", command(group_by="checkpoint"))):
        router.apply(stat_id, stat_from_json({**value, "stat_id": stat_id}))
    car = {"checkpoint_id": CHECKPOINTS[1], "lane": 2, "plate_number": "浙A12345", "speed_kmh": 40.0}
    events = router.route(Kind.VEHICLE, car, 0, T.vehicle, 0, 5)
    assert [(e.stat_id, e.group) for e in events] == [
        ("by-cp", CHECKPOINTS[1]), ("by-lane", f"{CHECKPOINTS[1]}/lane-2"), ("lane-2", f"{CHECKPOINTS[1]}/lane-2")]
    assert [e.key for e in events][1] == f"by-lane|{CHECKPOINTS[1]}/lane-2".encode()
    other = router.route(Kind.VEHICLE, {**car, "lane": 1, "checkpoint_id": CHECKPOINTS[2]}, 0, T.vehicle, 0, 6)
    assert [(e.stat_id, e.group) for e in other] == [("by-cp", CHECKPOINTS[2]), ("by-lane", f"{CHECKPOINTS[2]}/lane-1")]


def test_both_stages_reject_a_place_the_map_lacks_and_keep_the_rest() -> None:
    """Stage A answers (and routes nothing for) a rejected command; stage B, judging by the same map, drops it."""
    lanes = map_lanes(Geo(city_map()))
    assert lanes == MAP_LANES
    stage_a, stage_b = StatsRepartition(SETTINGS, Geo(city_map())), WindowedStats(SETTINGS, lanes=lanes)
    reasons = {}
    for stat_id, value in (("ok", command(filter={"checkpoint_id": CHECKPOINTS[0], "lane": 2})),
                           ("lane-3", command(filter={"checkpoint_id": CHECKPOINTS[0], "lane": 3})),
                           ("nowhere", command(filter={"checkpoint_id": NOWHERE})),
                           ("faces", command("face_count"))):
        raw = encode({**value, "stat_id": stat_id})
        stage_a.apply(stat_id.encode(), raw)
        stage_b.apply(stat_id.encode(), raw)
        reasons[stat_id] = (read_command(stat_id.encode(), raw, lanes)[2] or "").split(":")[0]
    assert set(stage_a.router.stats) == set(stage_b.commands) == {"ok"}
    assert reasons == {"ok": "", "lane-3": "filter.lane", "nowhere": "filter.checkpoint_id", "faces": "group_by"}
    # The same record with no map to judge by: the place is taken as given (only its shape is checked).
    blind = StatsRepartition(SETTINGS, Geo(DeploymentMap((), (), (), ())))
    blind.apply(b"nowhere", encode({**command(filter={"checkpoint_id": NOWHERE}), "stat_id": "nowhere"}))
    assert set(blind.router.stats) == {"nowhere"}


# -- end to end ---------------------------------------------------------------------------------------------

def lane_traffic(bootstrap: str, rng: random.Random, seconds: float) -> list[dict[str, Any]]:
    """Vehicles on every lane of the map's checkpoints (plates from a small pool, some unreadable) and some faces,
    each sent as it is captured; the faces count for no lane statistic."""
    pool = [values.plate(rng, "blue") for _ in range(20)]
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all", "log_level": 3})
    vehicles: list[dict[str, Any]] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for _ in range(6):
            n = len(vehicles)
            checkpoint = rng.choice(CHECKPOINTS)
            record = vehicle(f"lv{n}", checkpoint, rng.choice(pool), rng, capture_time(-rng.random() / 2))
            record.update(lane=rng.randint(1, MAP_LANES[checkpoint]), speed_kmh=round(rng.uniform(10, 90), 1))
            if rng.random() < 0.05:
                record["plate_number"] = UNRECOGNIZED
            vehicles.append(record)
            producer.produce(T.vehicle, encode(record), checkpoint.encode())
            if n % 4 == 0:
                person = face(f"lf{n}", checkpoint, rng)
                producer.produce(T.face, encode(person), checkpoint.encode())
        producer.poll(0)
        time.sleep(0.05)
    assert producer.flush(30) == 0
    return vehicles


def test_lane_statistics_equal_an_independent_tally_and_bad_ones_are_rejected(site: Site) -> None:
    rng = random.Random(29)
    site.service(allowed_lateness_s=2, partial_interval_s=0.5).start()
    cp = CHECKPOINTS[0]
    commands = [stat("l-count", "vehicle_count", "lane", 2),
                stat("l-speed", "avg_speed", "lane", 3, filter={"checkpoint_id": cp}),
                stat("l-plates", "distinct_plates", "lane", 3, filter={"lane": 2})]
    bad = {"l-faces": (stat("l-faces", "face_count", "lane", 5), "group_by:"),
           "l-lane3": (stat("l-lane3", "vehicle_count", "lane", 5, filter={"checkpoint_id": cp, "lane": 3}),
                       "filter.lane:"),
           "l-nowhere": (stat("l-nowhere", "vehicle_count", "lane", 5, filter={"checkpoint_id": NOWHERE}),
                         "filter.checkpoint_id:")}
    for value in [*commands, *(v for v, _reason in bad.values())]:
        site.publisher.command(T.control_stats, value["stat_id"], value)
    replies = site.reader(T.surveillance_replies, 1).read(lambda got: len({r["id"] for r in got}) >= 6)
    status = {r["id"]: (r["status"], r["reason"]) for r in replies}
    assert {c["stat_id"]: status[c["stat_id"]][0] for c in commands} == dict.fromkeys(
        (c["stat_id"] for c in commands), "accepted")
    for stat_id, (_value, reason) in bad.items():
        assert status[stat_id][0] == "rejected" and status[stat_id][1].startswith(reason), status[stat_id]

    vehicles = lane_traffic(site.broker.bootstrap, rng, 10.0)
    expected: dict[tuple[str, int, str], Any] = {}
    for value in commands:
        expected.update(tally(value, vehicles))
    assert {k[2] for k in expected if k[0] == "l-speed"} == {f"{cp}/lane-1", f"{cp}/lane-2"}

    results = site.reader(T.surveillance_stats)
    got = finals(results.read(lambda r: finals(r).keys() >= expected.keys(), timeout=90, quiet_s=1.0))
    assert got.keys() == expected.keys(), "no result for a rejected statistic, none for a group not counted"
    assert all(len(v) == 1 for v in got.values()), "one final per window and lane"
    wrong = {k: (got[k][0], v) for k, v in expected.items() if got[k][0] != pytest.approx(v, abs=0.006)}
    assert not wrong, list(wrong.items())[:5]
    groups = {k[2] for k in expected if k[0] == "l-count"}
    assert groups == {f"{c}/lane-{n}" for c in CHECKPOINTS for n in (1, 2)}, "every lane of every checkpoint"
    print(f"lane statistics: {len(expected)} finals over {len(groups)} lanes equal to the independent tally")

    # Every window above has closed: records for them now are late, counted on their lane's results only.
    late = [{**vehicle(f"late{n}", cp, "浙A0L001", rng, capture_time(-60)), "lane": 2} for n in range(5)]
    fresh = [{**vehicle(f"fresh{lane}", cp, "浙A0L002", rng), "lane": lane} for lane in (1, 2)]
    site.publisher.captures(T.vehicle, [*late, *fresh])   # a lane's late count shows on its next result
    lane_2 = f"{cp}/lane-2"
    after = results.read(lambda r: any(x["stat_id"] == "l-count" and x["group"] == lane_2 and x["late_records"] >= 5
                                       for x in r), quiet_s=1.0)
    assert max(x["late_records"] for x in after if x["stat_id"] == "l-count" and x["group"] == lane_2) == 5
    assert all(x["late_records"] == 0 for x in after if x["stat_id"] == "l-count" and x["group"] == f"{cp}/lane-1")
    assert all(len(finals(after)[k]) == 1 for k in expected), "a late record changes no final"
