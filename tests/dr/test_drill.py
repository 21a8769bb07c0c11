"""The failover drills end to end at the bus level (`--no-ingest`): each runs, writes its report, and measures
no loss where none is allowed. The drills with the ingest slice and DR HBase on both sites have not passed on
this machine yet (issue 14's closing note): their tests are not in the suite until they do."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.broker_process import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("spark"), pytest.mark.timeout(900)]
SHORT = ("--seconds", "4", "--after", "4", "--failover-after", "3", "--outage", "3", "--rate", "200")


def _drill(tmp_path: Path, *args: str) -> dict:
    report = tmp_path / "report"
    done = subprocess.run([sys.executable, "-m", "dr_mirror.drill", *args, *SHORT, "--report", str(report)],
                          cwd=ROOT, capture_output=True, text=True, timeout=880)
    chatter = "\n".join(line for line in done.stderr.splitlines() if not line.startswith("%"))  # librdkafka's
    assert done.returncode == 0, done.stdout[-2000:] + chatter[-3000:]
    assert (report / "drill.md").read_text().startswith("# DR drill")
    assert (report / "drill.png").read_bytes()[:4] == b"\x89PNG"
    return json.loads((report / "drill.json").read_text())


def test_mirror_crash_drill(tmp_path: Path) -> None:
    report = _drill(tmp_path, "--scenario", "mirror-crash", "--no-ingest")
    assert report["primary_records"] > 0 and report["behind_at_restart_records"] > 0
    assert (report["missing_at_dr"], report["extra_at_dr"]) == (0, 0)
    assert report["catch_up_s"] is not None


def test_primary_loss_drill(tmp_path: Path) -> None:
    report = _drill(tmp_path, "--scenario", "primary-loss", "--no-ingest")
    assert report["acknowledged_by_primary"] > 0
    assert report["lost_in_dr_topics"] == 0  # the replay window covers what the mirror had not copied
    assert report["rto_producers_s"] > 0 and report["rto_consumers_s"] > 0


def test_bus_only_failback_drill(tmp_path: Path) -> None:
    report = _drill(tmp_path, "--scenario", "failback", "--no-ingest")
    assert report["lost_in_primary_topics"] == 0 and report["primary_equals_dr"] is True
    assert "missing_in_primary_hbase" not in report  # nothing measured is never reported as zero
