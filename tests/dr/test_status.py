"""``python -m dr_mirror status``: the active site and the mirror's lag per topic, against a real mirror between two
real brokers, read the way an operator reads a running `make up` (its data directory)."""

from __future__ import annotations

import datetime as dt
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import Producer

from contracts import active_site as site
from contracts.ports import free_port
from contracts.processes import ROOT
from deploy.processes.mirror import MirrorProcess
from testkit.mirror import create_topics, end_offsets, write_properties
from tests.dr._support import wait_until


def status(data_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dr_mirror", "status", "--data-dir", str(data_dir)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def test_status_names_the_active_site_and_the_lag_per_topic(make_broker, tmp_path: Path) -> None:
    source, target = make_broker(name="source"), make_broker(name="target")
    create_topics(source.bootstrap, {"alerts": 2, "audit": 1})
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    port = free_port()
    (data_dir / "solution.toml").write_text(f"[dr]\nmirror_metrics_port = {port}\n")
    first = site.ensure(data_dir, "make up")
    assert site.ensure(data_dir, "a later start") == first  # a later start keeps the record
    props = write_properties(tmp_path / "mm2.properties", source.bootstrap, target.bootstrap)
    mirror = MirrorProcess(["--config", str(props), "--metrics-port", str(port)], tmp_path / "mirror.log").start()
    producer = Producer({"bootstrap.servers": source.bootstrap})
    try:
        for i in range(30):
            producer.produce("alerts", value=b"a%d" % i, partition=i % 2)
        assert producer.flush(10) == 0
        wait_until(lambda: end_offsets(target.bootstrap, "alerts", 2) == [15, 15], 60, "mirrored", mirror.logs)
        wait_until(lambda: "caught up" in status(data_dir).stdout, 30, "caught up", mirror.logs)
        said = status(data_dir)
        assert said.returncode == 0, said.stderr
        lines = said.stdout.splitlines()
        assert lines[0] == f"active: primary (since {first.since.isoformat(timespec='seconds')}: make up)"
        assert lines[1] == "mirror: caught up; losing the primary now would lose nothing"
        assert any(line.split() == ["alerts", "0", "0.0"] for line in lines), said.stdout

        assert target.proc is not None
        target.proc.send_signal(signal.SIGSTOP)  # the DR site stops taking records: 7 wait
        try:
            for i in range(7):
                producer.produce("alerts", value=b"b%d" % i, partition=0)
            assert producer.flush(10) == 0
            wait_until(lambda: "7 records behind" in status(data_dir).stdout, 30, "7 behind", mirror.logs)
            lines = status(data_dir).stdout.splitlines()
            assert lines[1].startswith("mirror: 7 records behind; losing the primary now would lose them, ")
            row = next(line.split() for line in lines if line.split()[:1] == ["alerts"])
            assert row[1] == "7" and float(row[2]) > 0, lines
        finally:
            target.proc.send_signal(signal.SIGCONT)
    finally:
        assert mirror.stop() == 0, mirror.logs()[-3000:]
    gone = status(data_dir)  # the mirror stopped: the site is still said, the lag is unknown
    assert gone.returncode == 1 and gone.stdout.startswith("active: primary") and "not answering" in gone.stdout


def test_a_damaged_record_or_a_wrong_directory_is_refused(tmp_path: Path) -> None:
    assert status(tmp_path).returncode == 2 and "solution.toml not found" in status(tmp_path).stderr
    (tmp_path / "solution.toml").write_text("[dr]\n")
    site.path(tmp_path).parent.mkdir(parents=True)
    site.path(tmp_path).write_text('{"active": "moon", "since": "2026-01-01T00:00:00+00:00"}')
    refused = status(tmp_path)
    assert refused.returncode == 2 and "names site 'moon'" in refused.stderr
    with pytest.raises(site.SiteRecordError):
        site.read(tmp_path)
    site.write(tmp_path, site.ActiveSite("dr", dt.datetime(2026, 11, 30, 22, 0, tzinfo=dt.UTC), "switchover"))
    assert site.read(tmp_path) == site.ActiveSite("dr", dt.datetime(2026, 11, 30, 22, 0, tzinfo=dt.UTC), "switchover")
