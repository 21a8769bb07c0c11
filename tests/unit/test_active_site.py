"""The active-site record's gate (contracts.active_site.Gate) and the watch hits a standing-by site must not repeat."""

from __future__ import annotations

import datetime as dt
import re
import subprocess
import sys
from pathlib import Path

import pytest

from contracts import active_site
from contracts.config import Config
from surveillance.hits import Trajectories

NOW = dt.datetime(2026, 12, 1, 8, 0, tzinfo=dt.UTC)
ROOT = Path(__file__).resolve().parents[2]


def test_a_gate_follows_the_record_and_keeps_its_answer_through_an_unreadable_one(tmp_path: Path) -> None:
    record = active_site.path(tmp_path)
    at_dr = active_site.Gate("dr", record, interval_s=0)
    at_primary = active_site.Gate("primary", record, interval_s=0)
    assert not at_dr.active() and at_primary.active()  # no record yet: the primary runs the business
    active_site.write(tmp_path, active_site.ActiveSite("dr", NOW, "switchover"))
    assert at_dr.active() and not at_primary.active()
    record.write_text("{half a rec")
    assert at_dr.active() and not at_primary.active()  # the last answer stands
    active_site.write(tmp_path, active_site.ActiveSite("primary", NOW, "failback"))
    assert not at_dr.active() and at_primary.active()


def test_while_a_switchover_drains_no_service_acts_but_the_mirror_from_the_site_left_copies_on(tmp_path: Path) -> None:
    record = active_site.path(tmp_path)
    services = {site: active_site.Gate(site, record, interval_s=0) for site in active_site.SITES}
    mirrors = {site: active_site.Gate(site, record, interval_s=0, while_switching=True) for site in active_site.SITES}
    last = {"planned": True, "from": "primary", "records_lost": 0, "drained_s": 2.5, "switch_s": 4.0}
    active_site.write(tmp_path, active_site.ActiveSite("primary", NOW, "make up", "dr"))
    assert not any(gate.active() for gate in services.values())
    assert mirrors["primary"].active() and not mirrors["dr"].active()
    assert active_site.read(tmp_path).line().endswith(", switching to dr")  # type: ignore[union-attr]
    active_site.write(tmp_path, active_site.ActiveSite("dr", NOW, "switchover", None, last))
    assert services["dr"].active() and not services["primary"].active()
    assert mirrors["dr"].active() and not mirrors["primary"].active()
    assert active_site.read(tmp_path) == active_site.ActiveSite("dr", NOW, "switchover", None, last)


@pytest.mark.parametrize("text", ['{"active": "dr", "since": "2026-12-01T08:00:00+00:00", "switching_to": "dr"}',
                                  '{"active": "dr", "since": "2026-12-01T08:00:00+00:00", "switching_to": "moon"}',
                                  '{"active": "dr", "since": "2026-12-01T08:00:00+00:00", "last": [1, 2]}'])
def test_a_record_switching_to_no_other_site_is_refused(tmp_path: Path, text: str) -> None:
    active_site.path(tmp_path).parent.mkdir(parents=True)
    active_site.path(tmp_path).write_text(text)
    with pytest.raises(active_site.SiteRecordError):
        active_site.read(tmp_path)


def test_a_gate_reads_the_record_at_most_once_an_interval(tmp_path: Path) -> None:
    gate = active_site.Gate("dr", active_site.path(tmp_path), interval_s=3600)
    assert not gate.active()
    active_site.write(tmp_path, active_site.ActiveSite("dr", NOW, "switchover"))
    assert not gate.active()  # a file read per batch would cost a system call each: read again in an hour


def test_the_site_section_is_checked() -> None:
    assert active_site.Gate.from_config(Config({})) is None  # no DR site: always active
    gate = active_site.Gate.from_config(Config({"site": {"name": "dr", "record": "/data/dr/active-site.json"}}))
    assert gate is not None and (gate.site, gate.record) == ("dr", Path("/data/dr/active-site.json"))
    with pytest.raises(ValueError, match=re.escape("site.name in s.toml should be one of primary, dr, not 'moon'")):
        active_site.Gate.from_config(Config({"site": {"name": "moon", "record": "r"}}, Path("s.toml")))
    with pytest.raises(ValueError, match=re.escape("site.record in s.toml should be the path")):
        active_site.Gate.from_config(Config({"site": {"name": "dr"}}, Path("s.toml")))


def _hit(hit_id: str, record_id: str, second: int) -> dict:
    return {"hit_id": hit_id, "watch_id": "w", "kind": "plate", "record_id": record_id, "checkpoint_id": "cp",
            "capture_time": f"2026-12-01T08:00:{second:02d}.000+08:00", "location": {}}


def test_only_a_hit_read_back_from_the_topic_counts_as_published() -> None:
    paths = Trajectories(points=2)
    paths.add(_hit("h1", "r1", 1))  # built here: its publishing may yet fail
    assert not paths.published("w", "h1")
    paths.add(_hit("h1", "r1", 1), on_topic=True)
    assert paths.published("w", "h1")
    paths.add(_hit("h2", "r2", 2), on_topic=True)
    paths.add(_hit("h3", "r3", 3), on_topic=True)  # past the last two: h1 is no longer kept, nor known
    assert not paths.published("w", "h1") and paths.published("w", "h3")
    paths.forget("w")
    assert not paths.published("w", "h3")


@pytest.mark.parametrize("service", ["surveillance", "monitoring"])
def test_a_service_with_a_bad_site_section_stops_at_start_naming_the_key(tmp_path: Path, service: str) -> None:
    path = tmp_path / "solution.toml"
    path.write_text('[site]\nname = "moon"\nrecord = "r.json"\n')
    run = subprocess.run([sys.executable, "-m", service, "--config", str(path)], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 2 and "site.name" in run.stderr and "'moon'" in run.stderr, run.stderr


def test_a_standing_by_site_publishes_to_its_own_copies_and_the_dr_loaders_copies_stay(tmp_path: Path) -> None:
    record = active_site.path(tmp_path)
    primary, dr = active_site.Gate("primary", record, interval_s=0), active_site.Gate("dr", record, interval_s=0)
    assert primary.local("ingest.stats") == "ingest.stats"  # active: the topic itself
    assert dr.local("audit") == "dr.audit" and dr.local("dr.ingest.stats") == "dr.ingest.stats"
    active_site.write(tmp_path, active_site.ActiveSite("dr", NOW, "switchover"))
    assert primary.local("ingest.stats") == "primary.ingest.stats" and dr.local("audit") == "audit"
    assert primary.own("capture.deadletter") == "primary.capture.deadletter"  # whatever the role
