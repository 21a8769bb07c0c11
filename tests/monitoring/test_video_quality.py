"""The cameras' video (issue 28, the video half), without a broker or a store: the footage judge on real segments
the camera simulator renders (every fault, every light), the watch's listing, cap, set-asides and resumption with a
fake store and clock, the gap and the footage moving a camera's state and alerts, and ``[monitoring.video]``."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from monitoring.config import ConfigError, Health, Rule, Video, parse
from monitoring.health import DEGRADED, HEALTHY, RECOVERING, SILENT, DeviceTrack, Fleet
from monitoring.locator import Locator
from monitoring.rules import candidates
from monitoring.video_judge import BLACK, BLURRED, FROZEN, OK, UNDECODABLE, judge, measure
from monitoring.video_watch import VideoWatch, thresholds
from testkit.city import city_map
from video.cameras import Camera, SegmentSettings, write_segment
from video.scene import LIGHTING
from video.storage import video_key

EXPECTED = {"ok": OK, "truncated": UNDECODABLE, "frozen": FROZEN, "black": BLACK, "blurred": BLURRED}
LIMITS = thresholds(Video())
SIZES = {"small": SegmentSettings(2, 5, 160, 96), "medium": SegmentSettings(3, 10, 320, 180)}
"""The integration test's size, and one twice as large at the simulator's frame rate (640x360 one-minute segments were
measured too, outside the tests: docs/architecture.md)."""
MARGIN = 2.0
"""Healthy footage must stay this many times clear of every threshold (and faulty footage as far on its side)."""


@pytest.fixture(scope="module")
def footage(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """A segment the camera simulator renders (cached: both judge tests read the same files)."""
    folder = tmp_path_factory.mktemp("segments")
    made: dict[tuple[str, str, str, int], Path] = {}

    def segment(light: str, fault: str, size: str, k: int = 0) -> Path:
        if (light, fault, size, k) not in made:
            start = dt.datetime(2026, 11, 30, 8, tzinfo=dt.UTC) + dt.timedelta(seconds=97 * k)
            made[light, fault, size, k] = write_segment(Camera(f"cam-{light}", light, fault), start, SIZES[size],
                                                        folder / f"{light}-{fault}-{size}-{k}.webm")
        return made[light, fault, size, k]

    return segment


# the judge, on the simulator's own footage
@pytest.mark.parametrize("light", sorted(LIGHTING))
def test_every_fault_is_found_in_every_light(footage: Callable[..., Path], light: str) -> None:
    for size in SIZES:
        for fault, result in EXPECTED.items():
            assert judge(footage(light, fault, size).read_bytes(), LIMITS) == result, (light, fault, size)


@pytest.mark.parametrize("light", sorted(LIGHTING))
def test_every_threshold_has_a_margin_on_both_sides(footage: Callable[..., Path], light: str) -> None:
    for size in SIZES:
        for k in range(2):
            m = measure(footage(light, "ok", size, k), LIMITS.frames_sampled)
            assert m is not None and m.decoded == m.promised
            assert m.luminance >= MARGIN * LIMITS.black_luminance, (light, size, m)
            assert m.laplacian >= MARGIN * LIMITS.blur_laplacian, (light, size, m)
            assert m.diff >= MARGIN * LIMITS.frozen_diff, (light, size, m)
        frozen = measure(footage(light, "frozen", size), LIMITS.frames_sampled)
        blurred = measure(footage(light, "blurred", size), LIMITS.frames_sampled)
        black = measure(footage(light, "black", size), LIMITS.frames_sampled)
        assert frozen is not None and frozen.diff * MARGIN <= LIMITS.frozen_diff, (light, size, frozen)
        assert blurred is not None and blurred.laplacian * MARGIN <= LIMITS.blur_laplacian, (light, size, blurred)
        assert black is not None and black.luminance * MARGIN <= LIMITS.black_luminance, (light, size, black)


@pytest.mark.parametrize("data", [b"", b"not a video at all", bytes(range(256)) * 40, b"\x1aE\xdf\xa3" + b"\0" * 500])
def test_what_is_no_video_is_undecodable(data: bytes) -> None:
    assert judge(data, LIMITS) == UNDECODABLE


# the watch, with a fake store and clock
T0 = dt.datetime(2026, 11, 30, 9, 0, tzinfo=dt.UTC).timestamp()
CFG = Video(interval_s=10, segment_s=10, gap_factor=3, max_per_interval=3, bad_segments=2)


class FakeStore:
    def __init__(self) -> None:
        self.objects: dict[str, tuple[int, str]] = {}
        """key -> (size, what the fake judge answers for it)."""
        self.down = False
        self.fetched: list[str] = []

    def upload(self, camera: str, start: float, result: str = OK, name: str = "segment.webm", size: int = 100) -> str:
        key = video_key(camera, dt.datetime.fromtimestamp(start, dt.UTC), name)
        self.objects[key] = (size, result)
        return key

    def list(self, prefix: str, recursive: bool = True) -> list[tuple[str, int]]:
        from monitoring.image_sampler import StoreUnavailable

        if self.down:
            raise StoreUnavailable("connection refused")
        keys = sorted(k for k in self.objects if k.startswith(prefix))
        if recursive:
            return [(k, self.objects[k][0]) for k in keys]
        tops = {prefix + k[len(prefix):].split("/", 1)[0] + ("/" if "/" in k[len(prefix):] else "") for k in keys}
        return [(k, 0 if k.endswith("/") else self.objects[k][0]) for k in sorted(tops)]

    def fetch(self, key: str, max_bytes: int) -> bytes | None:
        self.fetched.append(key)
        return self.objects[key][1].encode() if key in self.objects else None


def camera_fleet(tmp_path: Path, cameras: tuple[str, ...] = ("cam-1",), cfg: Video = CFG) -> Fleet:
    map_path = tmp_path / "map.json"
    base = city_map({"10.9.0.1": list(cameras)})
    devices = tuple(type(d)(d.device_ip, d.checkpoint_id, "video", d.recognizer_ip) for d in base.devices)
    type(base)(base.districts, base.checkpoints, devices, base.recognizers).save(map_path)
    locator = Locator(map_path)
    locator.refresh()
    fleet = Fleet(Health(silent_after_s=15, recovery_s=5), locator, T0 - 100, video=cfg)
    fleet.live_since = T0 - 100
    return fleet


def watch_over(fleet: Fleet, store: FakeStore, clock: list[float], cfg: Video = CFG) -> VideoWatch:
    return VideoWatch(cfg, store, fleet.cameras, fleet.video_listed,
                      lambda camera, start, result, t: fleet.video_segment(camera, start, result, t),
                      clock=lambda: clock[0], judge_bytes=lambda data: data.decode())


def step(fleet: Fleet, watch: VideoWatch, clock: list[float], seconds: float) -> None:
    clock[0] += seconds
    watch.poll()
    fleet.judge(clock[0])


GAP_RULE = Rule("CameraUploadGap", "video_gap", 30)
QUALITY_RULE = Rule("CameraFootageBad", "video_quality", 2)


def test_a_camera_that_stops_uploading_is_silent_with_a_gap_then_recovers(tmp_path: Path) -> None:
    fleet, store, clock = camera_fleet(tmp_path), FakeStore(), [T0]
    watch = watch_over(fleet, store, clock)
    fleet.judge(T0)  # the map's camera is expected from now on
    for _ in range(4):
        store.upload("cam-1", clock[0] - 10)
        step(fleet, watch, clock, 10)
    track = fleet.devices["cam-1"]
    assert (track.camera, track.state, track.video_problem) == (True, HEALTHY, "")
    assert fleet.silent_for(track, clock[0]) == 0  # no heartbeats expected from a camera
    step(fleet, watch, clock, 10)
    assert track.state == HEALTHY  # the newest began 30 s ago: not more than gap_factor * segment_s yet
    step(fleet, watch, clock, 10)
    assert (track.state, track.video_problem) == (SILENT, "gap")
    (alert,) = candidates(GAP_RULE, fleet, lambda group: None, clock[0])
    where = fleet.location(track)
    assert alert.labels == {"alertname": "CameraUploadGap", "severity": "warning", "kind": "video_gap",
                            "device_ip": "cam-1", "recognizer_ip": "10.9.0.1", "district": where.district,
                            "checkpoint_id": where.checkpoint_id, "crossroad": where.crossroad, "problem": "gap"}
    assert json.loads(alert.annotations["summary_params"]) == {"device_ip": "cam-1", "seconds": "40"}
    assert candidates(Rule("DeviceSilent", "device_silent", 15), fleet, lambda g: None, clock[0]) == []
    store.down = True  # a store that does not answer neither finds nor clears a gap
    store.upload("cam-1", clock[0] - 5)
    step(fleet, watch, clock, 10)
    assert track.state == SILENT
    store.down = False
    step(fleet, watch, clock, 10)
    assert (track.state, track.video_problem) == (RECOVERING, "gap")
    assert candidates(GAP_RULE, fleet, lambda group: None, clock[0]) == []
    store.upload("cam-1", clock[0] - 5)
    step(fleet, watch, clock, 10)
    assert (track.state, track.video_problem) == (HEALTHY, "")


def test_a_store_outage_makes_no_camera_silent(tmp_path: Path) -> None:
    fleet, store, clock = camera_fleet(tmp_path), FakeStore(), [T0]
    watch = watch_over(fleet, store, clock)
    fleet.judge(T0)
    for _ in range(3):
        store.upload("cam-1", clock[0] - 10)
        step(fleet, watch, clock, 10)
    store.down = True  # the camera keeps uploading, the monitor cannot see it
    for _ in range(8):
        store.upload("cam-1", clock[0] - 10)
        step(fleet, watch, clock, 10)
        assert fleet.devices["cam-1"].state == HEALTHY
    store.down = False
    step(fleet, watch, clock, 10)
    assert fleet.devices["cam-1"].state == HEALTHY


def test_a_map_camera_never_heard_of_has_a_gap_counted_from_when_it_was_expected(tmp_path: Path) -> None:
    fleet, store, clock = camera_fleet(tmp_path, ("cam-1", "cam-2")), FakeStore(), [T0]
    watch = watch_over(fleet, store, clock)
    fleet.judge(T0)
    for _ in range(3):
        store.upload("cam-1", clock[0] - 5)
        step(fleet, watch, clock, 10)
    assert fleet.devices["cam-2"].state == HEALTHY
    store.upload("cam-1", clock[0] - 5)
    step(fleet, watch, clock, 10)
    assert (fleet.devices["cam-2"].state, fleet.devices["cam-1"].state) == (SILENT, HEALTHY)
    (alert,) = candidates(GAP_RULE, fleet, lambda group: None, clock[0])
    assert alert.labels["device_ip"] == "cam-2" and "no segment seen" in alert.annotations["summary"]


def test_bad_footage_degrades_a_camera_with_reason_video_and_its_problem(tmp_path: Path) -> None:
    fleet, store, clock = camera_fleet(tmp_path), FakeStore(), [T0]
    watch = watch_over(fleet, store, clock)
    fleet.judge(T0)
    store.upload("cam-1", clock[0] - 10, OK)
    step(fleet, watch, clock, 10)
    store.upload("cam-1", clock[0] - 10, FROZEN)
    step(fleet, watch, clock, 10)
    track = fleet.devices["cam-1"]
    assert track.state == HEALTHY  # one bad segment is not yet a fault
    store.upload("cam-1", clock[0] - 10, BLACK)
    step(fleet, watch, clock, 10)
    assert (track.state, track.reason, track.video_problem) == (DEGRADED, "video", BLACK)
    (alert,) = candidates(QUALITY_RULE, fleet, lambda group: None, clock[0])
    assert (alert.labels["kind"], alert.labels["problem"], alert.labels["device_ip"]) == ("video_quality", BLACK,
                                                                                         "cam-1")
    assert alert.annotations["reason"] == "video"
    assert json.loads(alert.annotations["summary_params"]) == {"device_ip": "cam-1", "problem": BLACK,
                                                               "segments": "2"}
    assert candidates(Rule("Three", "video_quality", 3), fleet, lambda group: None, clock[0]) == []
    fleet.image("cam-1", "10.9.0.1", "", "capture.vehicle", clock[0], "black")  # a camera also judged by images
    for _ in range(3):
        fleet.image("cam-1", "10.9.0.1", "", "capture.vehicle", clock[0], "missing")
    store.upload("cam-1", clock[0] - 10, BLACK)
    step(fleet, watch, clock, 10)
    assert (track.state, track.reason) == (DEGRADED, "images,video")
    row = json.loads(json.dumps(track.to_json()))
    restored = DeviceTrack.from_json(row)
    assert (restored.camera, restored.video_problem, restored.reason) == (True, BLACK, "images,video")
    assert [r for _, r in restored.video.judged] == [OK, FROZEN, BLACK, BLACK]
    assert restored.video.newest == track.video.newest
    store.upload("cam-1", clock[0] - 10, OK)
    step(fleet, watch, clock, 10)
    assert (track.state, track.reason, track.video_problem) == (DEGRADED, "images", "")  # video good, images not
    assert candidates(QUALITY_RULE, fleet, lambda group: None, clock[0]) == []
    for _ in range(4):
        fleet.image("cam-1", "10.9.0.1", "", "capture.vehicle", clock[0], "ok")
    fleet.images = type(fleet.images)(window_s=5.0)  # the bad images aged out
    fleet.judge(clock[0])
    assert track.state == RECOVERING


def test_the_cap_judges_the_newest_of_each_camera_first_and_counts_the_rest(tmp_path: Path) -> None:
    fleet, store, clock = camera_fleet(tmp_path, ("cam-1", "cam-2")), FakeStore(), [T0]
    watch = watch_over(fleet, store, clock)
    for camera in ("cam-1", "cam-2"):
        for back in (25, 15, 5):
            store.upload(camera, T0 - back)
    store.upload("cam-1", T0 - 3600)  # before the camera was first seen: history, not new
    done = watch.poll()
    assert [(s.camera_id, T0 - s.start) for s, _ in done.judged] == [("cam-1", 15), ("cam-1", 5), ("cam-2", 5)]
    assert done.skipped == {"rate_limited": 3}
    assert watch.poll().judged == []  # skipped ones are not queued
    again = watch_over(fleet, store, clock)  # a restarted monitor resumes after the newest segment seen before
    store.upload("cam-2", T0 + 1)
    assert [(s.camera_id, s.start - T0) for s, _ in again.poll().judged] == [("cam-2", 1)]


def test_other_objects_in_the_bucket_are_set_aside_once_and_change_nothing(tmp_path: Path) -> None:
    fleet, store, clock = camera_fleet(tmp_path), FakeStore(), [T0]
    watch = watch_over(fleet, store, clock)
    store.upload("cam-1", T0 - 5)
    store.objects["readme.txt"] = (10, OK)                                    # not under a camera
    store.objects["cam-1/2026/11/30/notes.txt"] = (10, OK)                   # another key layout
    store.objects["cam-1/2026/11/30/085959_clip.mp4"] = (10, OK)             # a camera's other upload
    store.upload("cam-1", T0 - 2, size=0)                                     # empty
    store.upload("cam-1", T0 + 3600)                                          # dated ahead
    store.upload("cam-bikes", T0 - 3600 * 8, name="bikes.webm")               # the real clip: no camera
    done = watch.poll()
    assert done.skipped == {"foreign_key": 2, "not_segment": 2, "empty": 1, "future": 1}
    assert [s.key for s, _ in done.judged] == [video_key("cam-1", dt.datetime.fromtimestamp(T0 - 5, dt.UTC),
                                                         "segment.webm")]
    assert set(done.listed) == {"cam-1"} and "cam-bikes" not in fleet.devices
    assert watch.poll().skipped == {}  # each counted once


def test_a_camera_seen_only_in_the_bucket_is_watched_and_located_as_unknown(tmp_path: Path) -> None:
    fleet, store, clock = camera_fleet(tmp_path), FakeStore(), [T0]
    watch = watch_over(fleet, store, clock)
    fleet.judge(T0)
    store.upload("cam-1", T0 - 10)
    store.upload("cam-x", T0 - 10, UNDECODABLE)
    step(fleet, watch, clock, 10)
    store.upload("cam-1", clock[0] - 10)
    store.upload("cam-x", clock[0] - 10, UNDECODABLE)
    step(fleet, watch, clock, 10)
    track = fleet.devices["cam-x"]
    assert (track.camera, track.state, track.video_problem) == (True, DEGRADED, UNDECODABLE)
    assert not fleet.location(track).known
    assert set(fleet.cameras()) == {"cam-1", "cam-x"}


# the config
def test_video_config_defaults_and_values() -> None:
    assert parse({}).video == Video()
    cfg = parse({"video": {"enabled": False, "interval_s": 5, "segment_s": 2, "gap_factor": 2.5,
                           "max_per_interval": 4, "bad_segments": 1, "frames_sampled": 4, "black_luminance": 10,
                           "blur_laplacian": 30, "frozen_diff": 0.3}}).video
    assert cfg == Video(False, 5.0, 2.0, 2.5, 4, 1, Video().max_bytes, 4, 10.0, 30.0, 0.3)
    assert isinstance(cfg.max_per_interval, int) and isinstance(cfg.frames_sampled, int)


@pytest.mark.parametrize(("section", "message"), [
    ({"video": []}, r"monitoring\.video: should be a table"),
    ({"video": {"interval": 5}}, r"monitoring\.video: unknown field 'interval'"),
    ({"video": {"enabled": 1}}, r"monitoring\.video: field 'enabled'"),
    ({"video": {"interval_s": 0}}, r"monitoring\.video: field 'interval_s'"),
    ({"video": {"gap_factor": 0.5}}, r"monitoring\.video: field 'gap_factor'"),
    ({"video": {"max_per_interval": 0}}, r"monitoring\.video: field 'max_per_interval'"),
    ({"video": {"max_per_interval": 2.5}}, r"monitoring\.video: field 'max_per_interval' should be a whole"),
    ({"video": {"frames_sampled": 1}}, r"monitoring\.video: field 'frames_sampled'"),
    ({"video": {"black_luminance": 300}}, r"monitoring\.video: field 'black_luminance'"),
    ({"video": {"min_decoded_share": 1.5}}, r"monitoring\.video: field 'min_decoded_share'"),
    ({"video": {"segment_s": "1m"}}, r"monitoring\.video: field 'segment_s'"),
    ({"rules": [{"name": "V", "kind": "video_quality", "threshold": 0.5}]}, r"rule 'V'.*number of segments"),
])
def test_bad_video_config_names_the_key(section: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse(section)


def test_the_shipped_config_has_the_video_section_and_rules() -> None:
    import tomllib

    root = Path(__file__).resolve().parents[2]
    cfg = parse(tomllib.loads((root / "contracts" / "solution.toml").read_text())["monitoring"])
    assert cfg.video.enabled and cfg.video == Video()  # the shipped values are the measured defaults
    kinds = {r.kind: r.name for r in cfg.rules}
    assert (kinds["video_gap"], kinds["video_quality"]) == ("CameraUploadGap", "CameraFootageBad")


def test_video_alerts_render_in_every_console_language(tmp_path: Path) -> None:
    from web.i18n import LANGUAGES, catalog

    fleet, store, clock = camera_fleet(tmp_path, ("cam-1", "cam-2")), FakeStore(), [T0]
    watch = watch_over(fleet, store, clock)
    fleet.judge(T0)
    for _ in range(4):
        store.upload("cam-1", clock[0] - 5, BLURRED)
        step(fleet, watch, clock, 10)
    found = [c for rule in (GAP_RULE, QUALITY_RULE) for c in candidates(rule, fleet, lambda g: None, clock[0])]
    assert {c.labels["kind"] for c in found} == {"video_gap", "video_quality"}
    for candidate in found:
        params = json.loads(candidate.annotations["summary_params"])
        for lang in LANGUAGES:
            text = catalog(lang)[candidate.annotations["summary_key"]].format(**params)
            assert "{" not in text and text.strip(), (lang, text)
