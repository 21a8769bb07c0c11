"""The cloned-plate detector and the checkpoint geometry it stands on (pure logic, no processes)."""

from __future__ import annotations

import pytest

from contracts.deployment_map import Checkpoint, DeploymentMap, haversine_km
from surveillance.cloned import CloneDetector, CloneRules, Sighting
from surveillance.geo import Geo

PLATE = "浙A12345"
T0 = 1_800_000_000_000


def checkpoint(cid: str, lat: float, lon: float) -> Checkpoint:
    return Checkpoint(cid, cid.split("#")[0], int(cid.split("#")[1]), "N", lat, lon, 3, "10.0.0.1", None)


# West Lake to Xiaoshan airport is ~27 km; two cameras of one crossroad ~150 m apart.
GEO = Geo(DeploymentMap((), (
    checkpoint("330106#1#0#0", 30.2500, 120.1500),
    checkpoint("330106#1#1#0", 30.2510, 120.1510),
    checkpoint("330109#9#0#0", 30.2360, 120.4320),
    checkpoint("330106#2#0#0", 30.2590, 120.1500),   # 1 km north of the first
), (), ()))


def sighting(record_id: str, checkpoint_id: str, seconds: float, plate: str = PLATE) -> Sighting:
    ms = T0 + round(seconds * 1000)
    return Sighting(ms, record_id, plate, checkpoint_id, f"t+{seconds}")


def detector(**rules: float) -> CloneDetector:
    return CloneDetector(CloneRules(**rules), GEO.distance_km)


def test_haversine_matches_known_distances() -> None:
    # One degree of latitude is ~111.2 km everywhere; one of longitude shrinks with cos(latitude).
    assert haversine_km(30.0, 120.0, 31.0, 120.0) == pytest.approx(111.19, abs=0.01)
    assert haversine_km(0.0, 0.0, 0.0, 1.0) == pytest.approx(111.19, abs=0.01)
    assert haversine_km(60.0, 10.0, 60.0, 11.0) == pytest.approx(55.6, abs=0.1)
    assert haversine_km(30.25, 120.15, 30.25, 120.15) == 0.0
    # Beijing -> Shanghai, ~1068 km great circle.
    assert haversine_km(39.9042, 116.4074, 31.2304, 121.4737) == pytest.approx(1067, abs=3)


def test_geo_looks_up_checkpoints_and_falls_back_for_unknown_ones() -> None:
    assert GEO.distance_km("330106#1#0#0", "330109#9#0#0") == pytest.approx(27.1, abs=0.3)
    assert GEO.distance_km("330106#1#0#0", "999999#1#0#0") is None
    assert GEO.district("330109#9#0#0") == "330109"
    assert GEO.district("330110#4#0#0") == "330110"  # not on the map: the id's own prefix
    assert GEO.location("330106#2#0#0") == {"district": "330106", "crossroad": 2, "lat": 30.259, "lon": 120.15}
    assert GEO.location("330110#4#0#0")["lat"] is None
    assert GEO.diameter_km() == pytest.approx(27.1, abs=0.5)


def test_impossible_trip_is_one_clone_naming_both_sightings() -> None:
    d = detector()
    assert d.observe(sighting("a", "330106#1#0#0", 0)) == []
    [clone] = d.observe(sighting("b", "330109#9#0#0", 120))   # 27 km in 2 minutes: ~815 km/h
    assert (clone.first.record_id, clone.second.record_id) == ("a", "b")
    assert clone.distance_km == pytest.approx(27.1, abs=0.3)
    assert clone.speed_kmh == pytest.approx(clone.distance_km / (120 / 3600), rel=1e-3)
    assert clone.plate == PLATE


def test_plausible_trip_same_checkpoint_and_one_crossroad_are_not_clones() -> None:
    d = detector()
    assert d.observe(sighting("a", "330106#1#0#0", 0)) == []
    assert d.observe(sighting("b", "330109#9#0#0", 900)) == []   # 27 km in 15 min: 108 km/h
    assert d.observe(sighting("c", "330109#9#0#0", 901)) == []   # the same checkpoint a second later
    assert d.observe(sighting("d", "330109#9#0#0", 901)) == []   # ... even at the same instant
    e = detector()
    assert e.observe(sighting("a", "330106#1#0#0", 0)) == []
    assert e.observe(sighting("b", "330106#1#1#0", 0.5)) == []   # 140 m: below min_distance_km


def test_speed_limit_is_configurable_and_exclusive() -> None:
    # 1 km in 30 s is 120 km/h.
    assert detector().observe(sighting("a", "330106#1#0#0", 0)) == []
    d = detector(speed_limit_kmh=100)
    d.observe(sighting("a", "330106#1#0#0", 0))
    assert len(d.observe(sighting("b", "330106#2#0#0", 30))) == 1
    d = detector(speed_limit_kmh=130)
    d.observe(sighting("a", "330106#1#0#0", 0))
    assert d.observe(sighting("b", "330106#2#0#0", 30)) == []


def test_simultaneous_sightings_far_apart_have_a_finite_speed() -> None:
    d = detector()
    d.observe(sighting("a", "330106#1#0#0", 0))
    [clone] = d.observe(sighting("b", "330109#9#0#0", 0))
    assert clone.speed_kmh == pytest.approx(clone.distance_km * 3600, rel=1e-3)  # judged over one second


def test_out_of_order_sighting_is_judged_against_both_neighbours() -> None:
    d = detector()
    d.observe(sighting("a", "330106#1#0#0", 0))
    d.observe(sighting("c", "330106#1#0#0", 600))
    clones = d.observe(sighting("b", "330109#9#0#0", 300))   # arrives last, taken between a and c
    assert sorted((c.first.record_id, c.second.record_id) for c in clones) == [("a", "b"), ("b", "c")]


def test_a_replayed_sighting_is_judged_once() -> None:
    d = detector()
    d.observe(sighting("a", "330106#1#0#0", 0))
    assert len(d.observe(sighting("b", "330109#9#0#0", 60))) == 1
    assert d.observe(sighting("b", "330109#9#0#0", 60)) == []


def test_other_plates_never_pair() -> None:
    d = detector()
    d.observe(sighting("a", "330106#1#0#0", 0))
    assert d.observe(sighting("b", "330109#9#0#0", 10, plate="浙A54321")) == []


def test_state_is_bounded_by_horizon_and_count() -> None:
    d = detector(horizon_s=600, max_per_plate=4)
    for n in range(10):
        d.observe(sighting(f"p{n}", "330106#1#0#0", n))
    assert len(d.plates[PLATE]) == 4
    for n in range(2000):   # one sighting per second of 2000 different plates
        d.observe(sighting(f"r{n}", "330106#1#0#0", 10 + n, plate=f"浙B{n:05d}"))
    assert PLATE not in d.plates
    assert len(d) <= 602                   # only the last 600 s of sightings stay
    assert len(d._expiry) <= 2 * 602
    # A sighting older than the horizon finds nothing to pair with.
    assert d.observe(sighting("old", "330109#9#0#0", 5)) == []


def test_rules_refuse_nonsense() -> None:
    for bad in ({"speed_limit_kmh": 0}, {"horizon_s": -1}, {"min_distance_km": -0.1}, {"max_per_plate": 1}):
        with pytest.raises(ValueError):
            CloneRules(**bad)
