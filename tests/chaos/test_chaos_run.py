"""A short seeded chaos run (`python -m deploy.chaos`) on three broker hosts: every fault kind dealt, nothing found."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from contracts.processes import ROOT

SEED = 20261130


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_a_short_seeded_run_finds_nothing_and_reports_it(tmp_path: Path) -> None:
    report_dir = tmp_path / "report"
    done = subprocess.run([sys.executable, "-m", "deploy.chaos", "--seed", str(SEED), "--minutes", "0.75",
                           "--rate", "150", "--report", str(report_dir)], cwd=ROOT, capture_output=True, text=True,
                          timeout=400)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    report = json.loads((report_dir / "chaos.json").read_text())
    assert report["ok"] and report["seed"] == SEED and not any(report["anomalies"].values()), report
    assert report["acknowledged"] > 2000 and report["reads"] >= report["acknowledged"] * 0.9, report
    dealt = {entry["fault"].split()[0] for entry in report["timeline"]}
    assert len(dealt) >= 3, report["timeline"]  # this seed's schedule: kills, pauses, links and partitions
    assert "nothing found" in (report_dir / "chaos.md").read_text()


def test_bad_arguments_are_refused_clearly() -> None:
    done = subprocess.run([sys.executable, "-m", "deploy.chaos", "--faults", "kill,flood"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--faults: one or more of kill, pause, link, partition, clock" in done.stderr
