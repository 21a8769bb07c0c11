"""The failover drills end to end with real processes, each writing its report and measuring no loss where none
is allowed.

- failback runs WITH the ingest slice: each site is a broker, an HBase gateway and the real Spark capture ingest
  job (`spark_jobs/ingest_captures.py`), the load starts only once both sites are ready, and the zero end-to-end
  loss is asserted in HBase: every record acknowledged by either site has its row in DR HBase and in the
  primary's HBase after failback. Duplicates may only be rewritten rows: row keys are deterministic, so no
  record has two rows. Its first half is the primary-loss scenario, with both of that scenario's accidents:
  - the mirror is frozen for 3 s before the room is lost (`--mirror-behind`), so records the primary
    acknowledged are missing at DR (RPO > 0) and the devices' replay window is what brings them back;
  - the DR ingest job is killed -9 during the load (`--crash-dr-ingest`): the drill's supervisor restarts it
    from its checkpoint, the report counts the restart, and still nothing is missing.
- primary-loss on its own and mirror-crash run at the bus level (`--no-ingest`) in the suite, to keep CI under 30
  minutes (two more two-site Spark drills cost about four minutes of a CI worker); with the ingest slice they are
  `python -m dr_mirror.drill --scenario primary-loss --mirror-behind 3 --crash-dr-ingest` and
  `--scenario mirror-crash --crash-dr-ingest` (both passed at load 8-20).
A restart by the supervisor (an ingest job or mirror that fell over on a loaded machine) is allowed and
reported; giving up on one is not.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from contracts.processes import ROOT

# Its own group, not "spark": the drills (about ten minutes of Spark ingest on two sites) would make the one
# worker running every Spark test the last to finish by far; on free ports, they can overlap the others.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("drills"), pytest.mark.timeout(900)]
SHORT = ("--seconds", "4", "--after", "4", "--failover-after", "3", "--outage", "3", "--rate", "200")
REPLAY_S = 30.0  # the devices' replay window (the drill's default --replay)


def _drill(tmp_path: Path, *args: str) -> dict:
    report = tmp_path / "report"
    done = subprocess.run([sys.executable, "-m", "dr_mirror.drill", *args, *SHORT, "--report", str(report)],
                          cwd=ROOT, capture_output=True, text=True, timeout=880)
    chatter = "\n".join(line for line in done.stderr.splitlines() if not line.startswith("%"))  # librdkafka's
    assert done.returncode == 0, done.stdout[-2000:] + chatter[-3000:]
    assert (report / "drill.md").read_text().startswith("# DR drill")
    assert (report / "drill.png").read_bytes()[:4] == b"\x89PNG"
    result = json.loads((report / "drill.json").read_text())
    assert result["gave_up_on"] == [], result  # restarts are reported; a process given up on is a failure
    return result


def _no_loss_in_hbase(report: dict, site: str) -> None:
    assert report[f"missing_in_{site}_hbase"] == 0, report
    assert report[f"duplicate_rows_in_{site}_hbase"] == 0, report  # a replayed record rewrote its own row


def test_bus_only_mirror_crash_drill(tmp_path: Path) -> None:
    report = _drill(tmp_path, "--scenario", "mirror-crash", "--no-ingest")
    assert (report["missing_at_dr"], report["extra_at_dr"]) == (0, 0) and report["behind_at_restart_records"] > 0
    assert "missing_in_dr_hbase" not in report and report["restarts"] == {}  # nothing measured is never zero


def test_mirror_crash_drill_with_images_counts_the_images_missing_at_the_dr_site(tmp_path: Path) -> None:
    """Each site gets an object store, the devices put their images into the primary's, the DR image copier is
    killed -9 with the mirror and restarted with it: no record and no image missing at the DR site."""
    report = _drill(tmp_path, "--scenario", "mirror-crash", "--no-ingest", "--images")
    assert (report["missing_at_dr"], report["extra_at_dr"]) == (0, 0)
    assert report["images"] == report["dr_records_naming_images"] > 0  # the traffic's every capture has an image
    assert (report["images_missing_at_dr"], report["images_missing_at_both"]) == (0, 0), report
    assert report["images_at_dr"] == report["images"]


def test_images_are_measured_in_the_mirror_crash_drill_only(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "dr_mirror.drill", "--scenario", "primary-loss", "--images"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--images" in done.stderr


def test_bus_only_primary_loss_drill(tmp_path: Path) -> None:
    # The mirror is frozen 3 s before the room is lost, so it IS behind (otherwise it keeps up and RPO is 0):
    # only the devices' replay brings those records to DR.
    report = _drill(tmp_path, "--scenario", "primary-loss", "--mirror-behind", "3", "--no-ingest")
    assert report["acknowledged_by_primary"] > 0
    assert report["rpo_records"] > 0 and 0 < report["rpo_span_s"] < REPLAY_S  # behind, within the replay window
    assert report["lost_in_dr_topics"] == 0  # the replay window covers what the mirror had not copied
    assert report["rto_producers_s"] > 0 and report["rto_consumers_s"] > 0 and report["rto_rows_s"] is None
    assert "missing_in_dr_hbase" not in report and report["restarts"] == {}


def test_failback_drill_with_ingest_after_a_lagging_mirror_and_a_crashed_dr_ingest(tmp_path: Path) -> None:
    report = _drill(tmp_path, "--scenario", "failback", "--mirror-behind", "3", "--crash-dr-ingest")
    assert report["ingest"] is True and report["setup_s"] > 0
    assert report["restarts"] == {"dr ingest": 1}
    assert report["rpo_records"] > 0 and 0 < report["rpo_span_s"] < REPLAY_S
    assert report["rto_producers_s"] > 0 and report["rto_consumers_s"] > 0
    assert report["rto_rows_s"] is not None and report["rto_rows_s"] > report["rto_producers_s"]
    assert report["written_during_outage"] > 0
    assert report["lost_in_primary_topics"] == 0 and report["outage_records_missing_on_primary"] == 0
    assert report["primary_equals_dr"] is True  # so nothing acknowledged is missing at DR either
    _no_loss_in_hbase(report, "primary")
    _no_loss_in_hbase(report, "dr")
