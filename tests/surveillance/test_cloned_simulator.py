"""The simulator's traffic judged by the cloned-plate detector: only its deliberate pair is a clone.

Under ``make up`` every capture passes the cloned-plate check; random plates reused across the city or
targets jumping between checkpoints faster than a car would bury the one real alert in false ones.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import timedelta

from contracts.records import UNRECOGNIZED, Kind, epoch_ms
from ingest.city import build_city
from ingest.traffic import Traffic, TrafficConfig
from ingest.values import numbered_plate
from surveillance.cloned import CloneDetector, CloneRules, Sighting
from surveillance.geo import Geo
from tests.unit.test_ingest_simulator import FIXED


def test_numbered_plates_are_distinct_and_keep_their_prefix() -> None:
    plates = [numbered_plate("浙A12345", n) for n in range(50_000)]
    assert len(set(plates)) == len(plates)
    assert all(p.startswith("浙A") and len(p) == 7 for p in plates)
    assert numbered_plate("浙AD12345", 7).startswith("浙AD")   # a green plate keeps its D/F


def test_five_minutes_of_traffic_raise_clones_only_for_the_deliberate_pair() -> None:
    city = build_city(5, 96)                      # four crossroads per district: routes of four checkpoints
    now = [FIXED]
    traffic = Traffic(city, TrafficConfig(seed=5, cloned_pairs=1, target_every=20), clock=lambda: now[0])
    twins = Counter(t.plate for t in traffic.targets if t.plate)
    [cloned] = [plate for plate, n in twins.items() if n == 2]
    detector = CloneDetector(CloneRules(), Geo(city.deployment_map()).distance_km)
    plates: Counter[str] = Counter()
    clones = []
    for step in range(3000):                      # 100 records/s for 300 s, in 0.1 s steps
        now[0] = FIXED + timedelta(seconds=step / 10)
        for emitted in traffic.records(10, step / 10):
            record = json.loads(emitted.value)
            if emitted.kind is not Kind.VEHICLE or record["plate_number"] == UNRECOGNIZED:
                continue
            plates[record["plate_number"]] += 1
            clones += detector.observe(Sighting(epoch_ms(record["capture_time"]), record["record_id"],
                                                record["plate_number"], record["checkpoint_id"],
                                                record["capture_time"]))
    repeated = {plate for plate, n in plates.items() if n > 1}
    assert repeated <= set(twins), "only targets are seen twice: one car, one plate"
    assert all(plates[plate] >= 3 for plate in twins), {plate: plates[plate] for plate in twins}
    assert clones, "the deliberate pair is found"
    assert {c.plate for c in clones} == {cloned}
    print(f"simulated 300 s: {sum(plates.values())} plates read, {len(clones)} clone pairs, all of {cloned}")
