"""How the stages apply their control records (pure: the stage objects without a bus)."""

from __future__ import annotations

from pathlib import Path

from contracts.config import Config
from contracts.deployment_map import DeploymentMap
from contracts.records import encode
from surveillance.cloned_stage import ClonedPlates, parse_sighting
from surveillance.geo import Geo
from surveillance.settings import Settings
from surveillance.stats_stage import StatsRepartition
from surveillance.stats_windows_stage import WindowedStats

SETTINGS = Settings.from_config(Config({"surveillance": {"instance": "test"}, "map": {"path": "/nonexistent"}},
                                       Path("test.toml")))
GEO = Geo(DeploymentMap((), (), (), ()))
NOW = 1795478400000 + 1


def test_statistics_start_redefine_stop_and_a_bad_command_stops_the_one_it_replaces() -> None:
    """Both statistics stages apply the same records to the same effect (stage A routes, stage B windows)."""
    stage_a, stage_b = StatsRepartition(SETTINGS, GEO), WindowedStats(SETTINGS)

    def apply(key: bytes, value: bytes | None) -> None:
        stage_a.apply(key, value)
        stage_b.apply(key, value)

    def active() -> dict[str, int]:
        windows = {k: c.window_s * 1000 for k, c in stage_b.commands.items()}
        assert windows == {k: c.window_s * 1000 for k, (c, _v, _since) in stage_a.router.stats.items()}
        return windows

    command = {"stat_id": "s1", "measure": "vehicle_count", "group_by": "city", "window_s": 10}
    apply(b"s1", encode(command))
    assert active() == {"s1": 10_000}
    apply(b"s1", encode({**command, "window_s": 60}))
    assert active() == {"s1": 60_000}
    apply(b"s2", encode({**command, "stat_id": "s2", "measure": "loudness"}))
    apply(b"s3", encode({**command, "stat_id": "other"}))        # id differs from the key
    assert active() == {"s1": 60_000}
    assert stage_b.back_ms() == 60_000 + 10_000 + 60_000          # longest window + lateness + slack
    apply(b"s1", None)
    assert active() == {}
    apply(b"s1", encode(command))
    apply(b"s1", b"{not json")                                     # what compaction keeps: no statistic
    assert active() == {}


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
