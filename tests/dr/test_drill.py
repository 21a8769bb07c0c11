"""The failover drills end to end: each runs, writes its report, and measures no loss where none is allowed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.broker_process import ROOT


def _drill(tmp_path: Path, *args: str) -> dict:
    report = tmp_path / "report"
    done = subprocess.run([sys.executable, "-m", "dr_mirror.drill", *args, "--report", str(report)], cwd=ROOT,
                          capture_output=True, text=True, timeout=280)
    chatter = "\n".join(line for line in done.stderr.splitlines() if not line.startswith("%"))  # librdkafka's
    assert done.returncode == 0, done.stdout[-2000:] + chatter[-3000:]
    assert (report / "drill.md").read_text().startswith("# DR drill")
    assert (report / "drill.png").read_bytes()[:4] == b"\x89PNG"
    return json.loads((report / "drill.json").read_text())


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_mirror_crash_drill(tmp_path: Path) -> None:
    report = _drill(tmp_path, "--scenario", "mirror-crash", "--seconds", "4", "--after", "3", "--outage", "3")
    assert report["primary_records"] > 0
    assert (report["missing_at_dr"], report["extra_at_dr"]) == (0, 0)
    assert report["catch_up_s"] is not None


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_primary_loss_drill(tmp_path: Path) -> None:
    report = _drill(tmp_path, "--scenario", "primary-loss", "--seconds", "4", "--after", "3", "--failover-after", "3")
    assert report["acknowledged_by_primary"] > 0
    assert report["lost_after_replay"] == 0  # the replay window covers what the mirror had not copied
    assert report["rto_producers_s"] is not None and report["rto_consumers_s"] is not None
