"""How the stages apply their control records (pure: the stage objects without a bus)."""

from __future__ import annotations

from pathlib import Path

from contracts.config import Config
from contracts.deployment_map import DeploymentMap
from contracts.records import encode
from surveillance.cloned_stage import ClonedPlates, parse_sighting
from surveillance.geo import Geo
from surveillance.settings import Settings
from surveillance.stats_stage import LiveStats

SETTINGS = Settings.from_config(Config({"surveillance": {"instance": "test"}, "map": {"path": "/nonexistent"}},
                                       Path("test.toml")))
GEO = Geo(DeploymentMap((), (), (), ()))
NOW = 1795478400000 + 1


def test_statistics_start_redefine_stop_and_a_bad_command_stops_the_one_it_replaces() -> None:
    live = LiveStats(SETTINGS, GEO)
    command = {"stat_id": "s1", "measure": "vehicle_count", "group_by": "city", "window_s": 10}
    live.apply(b"s1", encode(command))
    assert live.windows.stats["s1"].window_ms == 10_000
    live.apply(b"s1", encode({**command, "window_s": 60}))
    assert live.windows.stats["s1"].window_ms == 60_000
    live.apply(b"s2", encode({**command, "stat_id": "s2", "measure": "loudness"}))
    live.apply(b"s3", encode({**command, "stat_id": "other"}))        # id differs from the key
    assert set(live.windows.stats) == {"s1"} and live.windows.stats["s1"].window_ms == 60_000
    assert live.back_ms() == 60_000 + 10_000 + 60_000                  # longest window + lateness + slack
    live.apply(b"s1", None)
    assert live.windows.stats == {}
    live.apply(b"s1", encode(command))
    live.apply(b"s1", b"{not json")                                     # what compaction keeps: no statistic
    assert live.windows.stats == {}


def test_cloned_stage_knows_the_watched_plates_only() -> None:
    stage = ClonedPlates(SETTINGS, GEO)
    plate = {"kind": "plate", "plate": "浙A12345", "reason": "stolen"}
    stage.apply_watch(b"w2", encode({"watch_id": "w2", **plate}))
    stage.apply_watch(b"w1", encode({"watch_id": "w1", **plate}))
    stage.apply_watch(b"w3", encode({"watch_id": "w3", "kind": "plate", "plate": "not a plate"}))
    assert stage.watch_of("浙A12345", NOW) == "w1" and stage.watch_of("浙B12345", NOW) is None
    stage.apply_watch(b"w1", None)
    assert stage.watch_of("浙A12345", NOW) == "w2"
    stage.apply_watch(b"w2", encode({"watch_id": "w2", "kind": "face", "feature": "AAAA"}))   # rejected
    assert stage.watch_of("浙A12345", NOW) is None
    stage.apply_watch(b"w4", encode({"watch_id": "w4", **plate, "expires_at": "2026-11-24T08:00:00.000+08:00"}))
    assert stage.watch_of("浙A12345", 1795478400000 - 1) == "w4" and stage.watch_of("浙A12345", NOW) is None


def test_sightings_are_parsed_strictly() -> None:
    good = {"plate": "浙A12345", "record_id": "r1", "checkpoint_id": "330106#1#0#0",
            "capture_time": "2026-11-24T08:00:00.000+08:00"}
    assert parse_sighting(encode(good)).capture_ms == 1795478400000
    for bad in (b"[]", encode({**good, "plate": ""}), encode({**good, "capture_time": "noon"}), None):
        try:
            parse_sighting(bad)
        except (ValueError, KeyError, TypeError):
            continue
        raise AssertionError(f"accepted {bad!r}")
