"""Capture-image quality (issue 28), without a broker or a store: the judge on real JPEGs made with Pillow, the
sampler's deterministic selection, cap and set-asides, the images share moving a device's state and alert, and
the ``[monitoring.images]`` config."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from PIL import Image

from monitoring.config import ConfigError, Health, Images, Rule, parse
from monitoring.health import DEGRADED, HEALTHY, RECOVERING, DeviceTrack, Fleet
from monitoring.image_judge import BLACK, MISSING, OK, UNDECODABLE, judge
from monitoring.image_sampler import ImageSampler, RateCap, StoreUnavailable, selected
from monitoring.locator import Locator
from monitoring.record_checks import MalformedRecord
from monitoring.rules import candidates

NOW = 1_800_000_000.0


def jpeg(image: Image.Image, fmt: str = "JPEG") -> bytes:
    out = io.BytesIO()
    image.save(out, fmt, quality=70)
    return out.getvalue()


PICTURE = jpeg(Image.effect_noise((320, 180), 64).convert("RGB"))
BLACK_FRAME = jpeg(Image.new("RGB", (320, 180)))


# the judge
@pytest.mark.parametrize(("data", "result"), [
    (PICTURE, OK),
    (PICTURE[: len(PICTURE) // 2], UNDECODABLE),            # a truncated upload still opens: decoded whole, it fails
    (BLACK_FRAME, BLACK),
    (jpeg(Image.new("RGB", (320, 180), (20, 20, 20))), OK),  # a dark night scene is not a dead sensor
    (b"GIF89a not a picture at all", UNDECODABLE),
    (jpeg(Image.effect_noise((64, 64), 64).convert("RGB"), "PNG"), UNDECODABLE),  # an image, but no capture JPEG
    (b"", UNDECODABLE),
    (None, MISSING),
])
def test_judge(data: bytes | None, result: str) -> None:
    assert judge(data, 8.0) == result


# the sampler
def test_selection_is_deterministic_and_close_to_the_share() -> None:
    ids = [f"rec-{i}" for i in range(20_000)]
    picked = [i for i in ids if selected(i, 0.02)]
    assert picked == [i for i in ids if selected(i, 0.02)]
    assert 300 <= len(picked) <= 500
    assert set(picked) <= {i for i in ids if selected(i, 0.1)}  # a larger share keeps every record of a smaller
    assert not any(selected(i, 0.0) for i in ids[:1000]) and all(selected(i, 1.0) for i in ids[:1000])


def test_rate_cap_allows_a_second_s_worth_then_refills() -> None:
    clock = [0.0]
    cap = RateCap(3, lambda: clock[0])
    assert [cap.take() for _ in range(5)] == [True, True, True, False, False]
    clock[0] += 1 / 3
    assert [cap.take(), cap.take()] == [True, False]


def capture(record_id: str = "r1", **fields: object) -> bytes:
    record = {"record_id": record_id, "device_ip": "10.0.0.1", "recognizer_ip": "10.9.0.1",
              "checkpoint_id": "110100#1#0#0", "capture_time": "2027-01-15T08:00:00.000+08:00",
              "image_url": f"s3://captures/vehicle/2027/01/15/110100-1-0-0/{record_id}.jpg", **fields}
    return json.dumps(record).encode()


class Store:
    def __init__(self, objects: dict[str, bytes], down: bool = False) -> None:
        self.objects, self.down, self.asked = objects, down, []

    def __call__(self, key: str) -> bytes | None:
        self.asked.append(key)
        if self.down:
            raise StoreUnavailable("connection refused")
        return self.objects.get(key)


def sampler(store: Store, **settings: float) -> tuple[ImageSampler, list]:
    delivered: list = []
    cfg = Images(**{"sample_share": 1.0, "max_per_s": 100.0, **settings})
    return ImageSampler(cfg, store, delivered.append, clock=lambda: 0.0), delivered


def test_sampled_records_are_fetched_judged_and_delivered_per_device() -> None:
    key = "vehicle/2027/01/15/110100-1-0-0/{}.jpg"
    store = Store({key.format("a"): PICTURE, key.format("b"): BLACK_FRAME, key.format("c"): PICTURE[:900]})
    sample, delivered = sampler(store)
    for record_id in "abcd":
        sample.take("capture.vehicle", capture(record_id), NOW)
    assert [j.result for j in delivered] == [OK, BLACK, UNDECODABLE, MISSING]  # d: no such key
    first = delivered[0]
    assert (first.device_ip, first.recognizer_ip, first.checkpoint_id, first.topic) == (
        "10.0.0.1", "10.9.0.1", "110100#1#0#0", "capture.vehicle")
    assert first.t == datetime(2027, 1, 15, tzinfo=UTC).timestamp()  # the capture time (08:00 at +08:00)


def test_records_outside_the_sample_are_neither_checked_nor_fetched() -> None:
    store = Store({})
    sample, delivered = sampler(store, sample_share=0.5, max_per_s=1000)
    ids = [f"r{i}" for i in range(200)]
    for record_id in ids:
        sample.take("capture.face", capture(record_id), NOW)
    assert len(delivered) == len(store.asked) == sum(selected(i, 0.5) for i in ids)
    outside = next(i for i in ids if not selected(i, 0.5))
    assert sample.take("capture.face", capture(outside, device_ip=7, image_url="http://x"), NOW) is None


def test_no_image_is_missing_unless_the_device_is_not_to_blame() -> None:
    store = Store({})
    sample, delivered = sampler(store)
    sample.take("capture.vehicle", capture("a", image_url="", image_error="no_image"), NOW)
    for reason in ("upload_failed", "images_off"):
        assert sample.take("capture.vehicle", capture("b", image_url="", image_error=reason), NOW) is None
    assert [j.result for j in delivered] == [MISSING] and store.asked == []


def test_over_the_cap_or_with_the_store_down_nothing_is_judged() -> None:
    sample, delivered = sampler(Store({}), max_per_s=2)
    results = [sample.take("capture.vehicle", capture(f"r{i}"), NOW) for i in range(5)]
    assert sum(r is not None for r in results) == 2
    down, delivered = sampler(Store({}, down=True))
    assert down.take("capture.vehicle", capture(), NOW) is None and delivered == []


@pytest.mark.parametrize(("raw", "reason"), [
    (b"\xff not json", "undecodable"),
    (b"[1, 2]", "not_object"),
    (None, "not_object"),
    (json.dumps({"device_ip": "10.0.0.1"}).encode(), "invalid"),                      # no record_id
    (capture(device_ip=""), "invalid"),
    (capture(image_url="s3://videos/cam-1/x.webm"), "invalid"),                        # outside captures
    (capture(image_url="https://example.org/x.jpg"), "invalid"),
    (capture(capture_time="yesterday"), "invalid"),
    (capture(capture_time="2099-01-01T00:00:00.000+08:00"), "future"),
])
def test_malformed_or_foreign_records_are_set_aside(raw: bytes | None, reason: str) -> None:
    store = Store({})
    sample, delivered = sampler(store)
    with pytest.raises(MalformedRecord) as refused:
        sample.take("capture.vehicle", raw, NOW)
    assert refused.value.reason == reason and delivered == [] and store.asked == []


# the images share and the device state
def fleet_with(tmp_path: Path, **images: float) -> Fleet:
    cfg = Images(**{"window_s": 60.0, "degraded_share": 0.5, "min_images": 4, **images})
    return Fleet(Health(window_s=10, silent_after_s=30, recovery_s=5), Locator(tmp_path / "no-map.json"),
                 started_at=NOW - 100, images=cfg)


def feed(fleet: Fleet, t: float, results: list[str], ip: str = "10.0.0.1") -> None:
    fleet.heartbeat(ip, "10.9.0.1", "110100#1#0#0", "capture.vehicle", t, int(t - NOW + 1000), 0)
    for result in results:
        fleet.image(ip, "10.9.0.1", "110100#1#0#0", "capture.vehicle", t, result)


RULE = Rule("CaptureImagesBad", "capture_images", 0.5)


def test_bad_images_degrade_a_device_with_reason_images_and_alert_on_it(tmp_path: Path) -> None:
    fleet = fleet_with(tmp_path)
    feed(fleet, NOW - 2, [OK, OK, BLACK])
    fleet.judge(NOW)
    track = fleet.devices["10.0.0.1"]
    assert (track.state, track.images_bad) == (HEALTHY, None)  # three images say nothing yet
    feed(fleet, NOW - 1, [BLACK, UNDECODABLE])
    fleet.judge(NOW)
    assert (track.state, track.reason, track.images_bad) == (DEGRADED, "images", pytest.approx(0.6))
    (alert,) = candidates(RULE, fleet, lambda group: None, NOW)
    where = fleet.location(track)
    assert alert.labels == {"alertname": "CaptureImagesBad", "severity": "warning", "kind": "capture_images",
                            "device_ip": "10.0.0.1", "recognizer_ip": "10.9.0.1", "district": where.district,
                            "checkpoint_id": "110100#1#0#0", "crossroad": where.crossroad}  # located as others
    assert alert.annotations["reason"] == "images"
    assert json.loads(alert.annotations["summary_params"]) == {"device_ip": "10.0.0.1", "share": "60%",
                                                               "checked": "5", "found": "black 2, undecodable 1"}


def test_images_hold_the_state_while_too_few_then_recover_as_they_age_out(tmp_path: Path) -> None:
    fleet = fleet_with(tmp_path)
    feed(fleet, NOW, [BLACK] * 4)
    fleet.judge(NOW)
    track = fleet.devices["10.0.0.1"]
    assert track.state == DEGRADED
    for t in range(1, 70, 5):  # the bad images age out; no new image yet: nothing to clear it with
        feed(fleet, NOW + t, [])
        fleet.judge(NOW + t)
    assert (track.state, track.images_bad) == (DEGRADED, None)
    feed(fleet, NOW + 70, [OK] * 4)
    fleet.judge(NOW + 70)
    assert (track.state, track.reason) == (RECOVERING, "images")
    assert candidates(RULE, fleet, lambda group: None, NOW + 70) == []
    feed(fleet, NOW + 80, [OK])
    fleet.judge(NOW + 80)
    assert (track.state, track.reason) == (HEALTHY, "")


def test_the_images_window_is_persisted_with_the_device(tmp_path: Path) -> None:
    fleet = fleet_with(tmp_path)
    feed(fleet, NOW - 3, [BLACK, OK])
    feed(fleet, NOW - 1, [MISSING, MISSING])
    fleet.judge(NOW)
    track = fleet.devices["10.0.0.1"]
    assert "10.0.0.1" in fleet.dirty
    row = json.loads(json.dumps(track.to_json()))
    restored = DeviceTrack.from_json(row)
    assert (restored.state, restored.reason, restored.images_bad) == (DEGRADED, "images", 0.75)
    assert restored.images.counts(NOW - 60) == {BLACK: 1, OK: 1, MISSING: 2}
    older = {k: v for k, v in row.items() if k not in ("images", "images_bad", "reason")}  # a row from before
    assert DeviceTrack.from_json(older).images.counts(0) == {}
    damaged = DeviceTrack.from_json({**row, "images": [[1, {"ok": "x"}], "junk", [2, {"ok": 1}]]})
    assert damaged.images.counts(0) == {OK: 1}


def test_late_images_land_in_their_own_second(tmp_path: Path) -> None:
    fleet = fleet_with(tmp_path)
    feed(fleet, NOW, [OK])
    fleet.image("10.0.0.1", "10.9.0.1", "110100#1#0#0", "capture.vehicle", NOW - 30, BLACK)
    fleet.image("10.0.0.1", "10.9.0.1", "110100#1#0#0", "capture.vehicle", NOW - 90, BLACK)  # outside the window
    window = fleet.devices["10.0.0.1"].images
    assert [b[0] for b in window.buckets] == sorted(b[0] for b in window.buckets)
    assert window.counts(NOW - 60) == {OK: 1, BLACK: 1}


# the config
def test_images_config_defaults_and_values() -> None:
    assert parse({}).images == Images()
    cfg = parse({"images": {"enabled": False, "sample_share": 0.1, "max_per_s": 5, "window_s": 120,
                            "degraded_share": 0.3, "min_images": 6, "black_luminance": 12}}).images
    assert cfg == Images(False, 0.1, 5.0, 120.0, 0.3, 6, 12.0)
    assert isinstance(cfg.min_images, int)


@pytest.mark.parametrize(("section", "message"), [
    ({"images": []}, r"monitoring\.images: should be a table"),
    ({"images": {"sample_rate": 0.1}}, r"monitoring\.images: unknown field 'sample_rate'"),
    ({"images": {"enabled": "yes"}}, r"monitoring\.images: field 'enabled'"),
    ({"images": {"sample_share": 2}}, r"monitoring\.images: field 'sample_share' is a share"),
    ({"images": {"sample_share": -0.1}}, r"monitoring\.images: field 'sample_share'"),
    ({"images": {"degraded_share": 1.5}}, r"monitoring\.images: field 'degraded_share' is a share"),
    ({"images": {"max_per_s": 0}}, r"monitoring\.images: field 'max_per_s'"),
    ({"images": {"min_images": 0}}, r"monitoring\.images: field 'min_images'"),
    ({"images": {"window_s": "5m"}}, r"monitoring\.images: field 'window_s'"),
    ({"images": {"black_luminance": 300}}, r"monitoring\.images: field 'black_luminance'"),
    ({"rules": [{"name": "I", "kind": "capture_images", "threshold": 50}]}, r"rule 'I'.*'threshold' is a share"),
])
def test_bad_images_config_names_the_key(section: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse(section)


def test_the_shipped_config_has_the_images_section_and_rule() -> None:
    import tomllib

    root = Path(__file__).resolve().parents[2]
    cfg = parse(tomllib.loads((root / "contracts" / "solution.toml").read_text())["monitoring"])
    assert cfg.images.enabled and 0 < cfg.images.sample_share <= 1
    assert any(r.kind == "capture_images" and r.name == "CaptureImagesBad" for r in cfg.rules)
