"""Every rule kind's alert carries a console catalog key and parameters beside its English summary, and
both console catalogs (Chinese, English) render it completely: no placeholder left unfilled."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from contracts.ingest_stats import LatencyHistogram
from monitoring.config import KINDS, Health, Rule
from monitoring.health import DEGRADED, SILENT, Beat, DeviceTrack, Fleet
from monitoring.locator import Locator
from monitoring.rules import candidates
from web.i18n import LANGUAGES, catalog

NOW = 1_000_000.0
THRESHOLDS = {"latency_p99": 5000, "device_quality": 0.2, "device_silent": 15, "recognizer_degraded": 0.5,
              "ingest_stalled": 60, "consumer_lag": 100, "capture_images": 0.5, "video_gap": 180, "video_quality": 2}


def faulty_fleet(tmp_path: Path) -> Fleet:
    """A fleet in which every rule kind finds something: two degraded devices behind one recogniser, a
    silent one, a minute of slow captures, no ingest batch for two minutes while devices produce, and two cameras,
    one with a gap in its uploads and one with frozen footage."""
    fleet = Fleet(Health(), Locator(tmp_path / "no-map.json"), NOW - 300)
    fleet.live_since = NOW - 120
    for ip in ("10.0.0.1", "10.0.0.2"):
        track = fleet.devices[ip] = DeviceTrack(ip, "10.9.0.1", "110100#1#0#0", "capture.vehicle", state=DEGRADED,
                                                bad=0.6)
        track.beats.extend([Beat(NOW - 20, 100, 0), Beat(NOW - 10, 200, 0)])
        for result in ("black", "black", "missing", "ok"):
            track.images.add(NOW - 30, result)
        track.images_bad, track.reason = 0.75, "records,images"
    fleet.devices["10.0.0.3"] = DeviceTrack("10.0.0.3", "10.9.0.2", "110100#2#0#0", "capture.vehicle")
    gap = fleet.devices["cam-1"] = DeviceTrack("cam-1", "10.9.0.3", "110100#3#0#0", state=SILENT, camera=True,
                                               video_problem="gap")
    gap.video.newest = NOW - 400  # a camera that stopped uploading
    frozen = fleet.devices["cam-2"] = DeviceTrack("cam-2", "10.9.0.3", "110100#4#0#0", state=DEGRADED, camera=True,
                                                  reason="video", video_problem="frozen")
    for n in range(3):
        frozen.video.add(NOW - 60 + n, "frozen")
    slow = LatencyHistogram()
    slow.record_counts({30_000: 50})
    fleet.latency.append((NOW - 1, {"capture_to_ingest": slow}))
    return fleet


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_renders_in_every_console_language(kind: str, tmp_path: Path) -> None:
    rule = Rule(f"Rule-{kind}", kind, THRESHOLDS[kind])
    found = candidates(rule, faulty_fleet(tmp_path), lambda group: 500, NOW)
    assert found, kind
    for candidate in found:
        notes = candidate.annotations
        assert notes["summary_key"] == f"alert.summary.{kind}"
        assert re.fullmatch(r"[\x20-\x7e]+", notes["summary"]), notes["summary"]  # receivers keep English
        params = json.loads(notes["summary_params"])
        assert all(isinstance(v, str) for v in params.values())
        if "stage" in params:  # the page translates the stage's name itself
            params["stage_name"] = params["stage"]
        for lang in LANGUAGES:
            text = catalog(lang)[notes["summary_key"]].format(**params)
            assert "{" not in text and text.strip(), (lang, text)


def test_a_configured_summary_replaces_only_the_english_text(tmp_path: Path) -> None:
    rule = Rule("Stuck", "ingest_stalled", 60, summary="Ingest stuck: page the data team")
    (candidate,) = candidates(rule, faulty_fleet(tmp_path), lambda group: None, NOW)
    assert candidate.annotations["summary"] == "Ingest stuck: page the data team"
    assert candidate.annotations["summary_key"] == "alert.summary.ingest_stalled"
    assert json.loads(candidate.annotations["summary_params"])["seconds"] == "120"
