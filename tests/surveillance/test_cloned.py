"""Cloned-plate detection end to end: the service as a process, captures and commands on a real broker.

Ground truth is built into the captures: for each constructed plate the test knows whether its trips are
drivable at 200 km/h, and compares the ``cloned_plate`` hits with that set exactly (after the detector's
consumer group has committed every sighting, so "no hit" is not "not yet").
"""

from __future__ import annotations

import random
import time

import pytest

from contracts.alerts import fingerprint
from contracts.surveillance import cloned_hit_id
from contracts.topics import Topics
from deploy.processes.surveillance import ServiceProcess
from ingest import values
from surveillance.cloned_stage import ALERT_NAME, CLONED_GROUP, SIGHTINGS_GROUP
from testkit.surveillance import CHECKPOINTS, capture_time, vehicle
from tests.surveillance._support import Site, plate_watch
from tests.surveillance._support_s2 import wait_committed

T = Topics()
# _support's city: CHECKPOINTS[0] = 330102#0 at (30.25, 120.15); CHECKPOINTS[4] = 330106#0 at (30.35, 120.15),
# 11.1 km north; CHECKPOINTS[1] = 330102#1 at (30.26, 120.16), 1.45 km from CHECKPOINTS[0].


def trips(rng: random.Random) -> tuple[list[dict], set[tuple[str, str]]]:
    """Constructed trips and the clone pairs (earlier record, later record) they must raise."""
    records, expected = [], set()

    def seen(record_id: str, checkpoint: str, plate: str, seconds_ago: float) -> None:
        records.append(vehicle(record_id, checkpoint, plate, rng, capture_time(-seconds_ago)))

    seen("imp-a", CHECKPOINTS[0], "浙A0C001", 120)     # 11.1 km in one minute: 666 km/h
    seen("imp-b", CHECKPOINTS[4], "浙A0C001", 60)
    expected.add(("imp-a", "imp-b"))
    seen("ok-a", CHECKPOINTS[0], "浙A0C002", 700)      # 11.1 km in ten minutes: 67 km/h
    seen("ok-b", CHECKPOINTS[4], "浙A0C002", 100)
    seen("near-a", CHECKPOINTS[0], "浙A0C003", 50)     # 1.45 km in 40 s: 130 km/h, fast but drivable
    seen("near-b", CHECKPOINTS[1], "浙A0C003", 10)
    seen("same-a", CHECKPOINTS[2], "浙A0C004", 30)     # the same checkpoint twice, one second apart
    seen("same-b", CHECKPOINTS[2], "浙A0C004", 29)
    seen("w-a", CHECKPOINTS[5], "浙A0C005", 20)        # a watched plate: the hit names the watch
    seen("w-b", CHECKPOINTS[1], "浙A0C005", 19)
    expected.add(("w-a", "w-b"))
    seen("late-b", CHECKPOINTS[4], "浙A0C006", 40)     # arrives before its earlier sighting
    seen("late-a", CHECKPOINTS[0], "浙A0C006", 45)
    expected.add(("late-a", "late-b"))
    return records, expected


def background(rng: random.Random, count: int) -> list[dict]:
    """Passers-by: a plate each (unique), anywhere, now."""
    plates = sorted({values.plate(rng, "blue") for _ in range(count)})
    return [vehicle(f"bg{n}", CHECKPOINTS[n % len(CHECKPOINTS)], plate, rng) for n, plate in enumerate(plates)]


def clone_hits(hits: list[dict]) -> dict[tuple[str, str], dict]:
    return {(h["sightings"][0]["record_id"], h["sightings"][1]["record_id"]): h
            for h in hits if h["kind"] == "cloned_plate"}


def wait_processed(site: Site) -> None:
    wait_committed(site.broker.bootstrap, SIGHTINGS_GROUP, T.vehicle)
    wait_committed(site.broker.bootstrap, CLONED_GROUP, T.plate_sightings)


def test_impossible_trips_raise_one_hit_and_alert_each_plausible_ones_none(site: Site) -> None:
    rng = random.Random(21)
    site.service().start()
    site.publisher.command(T.control_watchlist, "w-clone", plate_watch("w-clone", "浙A0C005"))
    site.reader(T.surveillance_replies, 1).read(lambda got: len(got) >= 1)
    records, expected = trips(rng)
    site.publisher.captures(T.vehicle, background(rng, 200) + records)
    hits = site.reader(T.surveillance_hits).read(lambda got: len(clone_hits(got)) >= len(expected))
    wait_processed(site)
    found = clone_hits(site.readers[-1].read(lambda _got: True, quiet_s=1.0))
    print(f"cloned plates: {len(found)} hits, {len(expected)} expected")
    assert set(found) == expected

    hit = found[("imp-a", "imp-b")]
    assert hit["hit_id"] == cloned_hit_id("imp-a", "imp-b") and hit["watch_id"] is None
    assert hit["plate"] == "浙A0C001" and hit["record_id"] == "imp-b" and hit["checkpoint_id"] == CHECKPOINTS[4]
    assert hit["distance_km"] == pytest.approx(11.12, abs=0.05)
    assert hit["speed_kmh"] == pytest.approx(11.12 * 60, rel=0.02)
    assert [s["checkpoint_id"] for s in hit["sightings"]] == [CHECKPOINTS[0], CHECKPOINTS[4]]
    assert hit["sightings"][0]["location"]["lat"] == pytest.approx(30.25)
    assert hit["location"]["district"] == "330106"
    assert found[("w-a", "w-b")]["watch_id"] == "w-clone"
    keys = {key for key, value in site.readers[-1].records if value["kind"] == "cloned_plate"}
    assert keys == {"浙A0C001".encode(), b"w-clone", "浙A0C006".encode()}
    assert len(hits) >= len(expected)

    labels = {"alertname": ALERT_NAME, "plate": "浙A0C001", "severity": "critical"}
    alerts = site.reader(T.alerts, 1).read(lambda got: any(a["labels"].get("plate") == "浙A0C001" for a in got))
    alert = next(a for a in alerts if a["labels"] == labels)
    assert alert["status"] == "firing" and alert["fingerprint"] == fingerprint(labels)
    assert alert["annotations"]["hit_id"] == hit["hit_id"]


@pytest.mark.slow
def test_kill_9_between_two_sightings_loses_no_pair(site: Site) -> None:
    """The second sighting of a plate arrives after a kill -9 and a restart: the first is rebuilt, and the
    pairs judged before the kill are not judged again (their offsets were committed after the acks)."""
    rng = random.Random(22)
    service = site.service().start()
    firsts, seconds, expected = [], [], set()
    for n in range(40):
        plate = f"浙B{n:05d}"
        firsts.append(vehicle(f"k{n}-a", CHECKPOINTS[0], plate, rng, capture_time(-90)))
        seconds.append(vehicle(f"k{n}-b", CHECKPOINTS[4], plate, rng, capture_time(-30)))
        expected.add((f"k{n}-a", f"k{n}-b"))
    before = []   # whole pairs before the kill: their hits went out and are not raised again after it
    for n in range(10):
        before.append(vehicle(f"d{n}-a", CHECKPOINTS[0], f"浙C{n:05d}", rng, capture_time(-100)))
        before.append(vehicle(f"d{n}-b", CHECKPOINTS[4], f"浙C{n:05d}", rng, capture_time(-95)))
        expected.add((f"d{n}-a", f"d{n}-b"))
    site.publisher.captures(T.vehicle, background(rng, 300) + firsts + before)
    wait_processed(site)
    service.kill()
    service.start()
    site.publisher.captures(T.vehicle, seconds + background(random.Random(23), 100))
    hits = site.reader(T.surveillance_hits).read(lambda got: len(clone_hits(got)) >= len(expected))
    wait_processed(site)
    hits = site.readers[-1].read(lambda _got: True, quiet_s=1.0)
    assert set(clone_hits(hits)) == expected
    ids = [h["hit_id"] for h in hits if h["kind"] == "cloned_plate"]
    assert len(ids) == len(set(ids)) == len(expected)   # the rebuilt sightings raised nothing again


@pytest.mark.slow
def test_two_instances_share_the_sightings_and_one_survives_the_others_kill_9(site: Site) -> None:
    """Each plate's sightings meet in one instance; after a kill -9 the survivor takes the partitions over,
    rebuilds their plates and finds every pair (a replayed hit keeps its id)."""
    rng = random.Random(24)
    first, second = site.service().start(), site.service().start()

    def owns_sightings(service: ServiceProcess) -> bool:
        lines = [line for line in service.text().splitlines() if "cloned: assigned" in line]
        return bool(lines) and T.plate_sightings in lines[-1]

    deadline = time.monotonic() + 60
    while not (owns_sightings(first) and owns_sightings(second)):   # the partitions are split between them
        assert time.monotonic() < deadline, "the two instances did not share the sightings' partitions"
        time.sleep(0.3)
    firsts, seconds, expected = [], [], set()
    for n in range(60):
        plate = f"浙D{n:05d}"
        firsts.append(vehicle(f"t{n}-a", CHECKPOINTS[n % 4], plate, rng, capture_time(-90)))
        seconds.append(vehicle(f"t{n}-b", CHECKPOINTS[4 + n % 4], plate, rng, capture_time(-30)))
        expected.add((f"t{n}-a", f"t{n}-b"))
    site.publisher.captures(T.vehicle, background(rng, 300) + firsts)
    wait_processed(site)
    first.kill()
    site.publisher.captures(T.vehicle, seconds)
    hits = site.reader(T.surveillance_hits).read(lambda got: len(clone_hits(got)) >= len(expected), timeout=90)
    wait_processed(site)
    hits = site.readers[-1].read(lambda _got: True, quiet_s=1.0)
    assert set(clone_hits(hits)) == expected
    ids = [h["hit_id"] for h in hits if h["kind"] == "cloned_plate"]
    assert set(ids) == {cloned_hit_id(a, b) for a, b in expected}
