"""One solution config for every endpoint; flags override it, a missing default file means defaults."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from contracts import config as solution
from contracts import processes
from contracts.topics import Topics
from ingest import simulate
from spark_jobs import ingest_captures, launch


def test_shipped_config_names_every_endpoint() -> None:
    cfg = solution.load()
    assert cfg.path == solution.DEFAULT_PATH
    assert cfg.get("bus", "bootstrap_servers", "") == "127.0.0.1:9092"
    assert cfg.get("hbase", "port", 0) == 9090
    assert cfg.get("topics", "deadletter", "") == "capture.deadletter"
    for section in ("dr", "object_storage", "console", "simulator", "ingest", "spark"):
        assert cfg.section(section)


def test_flags_override_the_file(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text('[bus]\nbootstrap_servers = "kafka:9092"\n[hbase]\nport = 19090\n'
                    '[simulator]\nrate = 50\n[topics]\nvehicle = "v"\n')
    args, cfg = simulate.parse_args(["--config", str(path)])
    assert args.bootstrap_server == "kafka:9092" and args.rate == 50.0
    assert Topics.from_config(cfg).vehicle == "v"
    args, _ = simulate.parse_args(["--config", str(path), "--bootstrap-server", "b:1", "--rate", "7"])
    assert args.bootstrap_server == "b:1" and args.rate == 7.0
    args, _ = ingest_captures.parse_args(["--config", str(path), "--hbase-port", "1234"])
    assert args.hbase_port == 1234 and args.bootstrap_server == "kafka:9092" and args.vehicle_topic == "v"
    assert ingest_captures.writer_settings(args).topic_kinds == {"v": "vehicle", "capture.face": "face"}


def test_bad_config_is_refused(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        solution.load(tmp_path / "absent.toml")
    path = tmp_path / "bad.toml"
    path.write_text('[hbase]\nport = "ninety"\n')
    with pytest.raises(ValueError, match=r"hbase\.port"):
        solution.load(path).get("hbase", "port", 9090)


def test_spark_launch_is_light_and_local() -> None:
    cmd, pending = launch.command("job.py", ["--x"], launch.SparkSettings(cds_archive=None))
    assert pending is None
    assert cmd[cmd.index("--master") + 1] == "local[2]" and cmd[cmd.index("--driver-memory") + 1] == "512m"
    assert "spark.ui.enabled=false" in cmd and "spark.sql.shuffle.partitions=2" in cmd
    assert cmd[-2:] == ["job.py", "--x"]
    env = launch.environment({})
    assert env["SPARK_LOCAL_IP"] == "127.0.0.1" and env["PYSPARK_PYTHON"].endswith("python")


def test_a_niced_job_and_what_it_starts_run_lower_in_priority() -> None:
    """`make up` starts the video ingest job at ``[video] nice``: spark-submit under coreutils' nice, which every
    process the job starts (the JVM, its Python workers, the batch jobs) inherits."""
    cmd, _ = launch.command("job.py", [], launch.SparkSettings(cds_archive=None, nice=10))
    assert cmd[:3] == ["nice", "-n", "10"] and Path(cmd[3]).name == "spark-submit"
    assert launch.command("job.py", [], launch.SparkSettings(cds_archive=None))[0][0] != "nice"
    own = os.nice(0)
    said = subprocess.run([*processes.niced(7), sys.executable, "-c",
                           "import os, subprocess, sys; print(os.nice(0), subprocess.run([sys.executable, '-c', "
                           "'import os; print(os.nice(0))'], capture_output=True, text=True).stdout.strip())"],
                          capture_output=True, text=True, check=True).stdout.split()
    assert said == [str(min(own + 7, 19))] * 2
    with pytest.raises(ValueError, match="0 to 19"):
        processes.niced(20)


def test_cds_archive_is_recorded_privately_then_mapped(tmp_path: Path) -> None:
    archive = tmp_path / "jvm.jsa"
    cmd, pending = launch.command("job.py", [], launch.SparkSettings(cds_archive=archive))
    assert pending is not None and pending != archive
    assert f"-XX:ArchiveClassesAtExit={pending}" in cmd[cmd.index("--driver-java-options") + 1]
    archive.write_bytes(b"x")
    cmd, pending = launch.command("job.py", [], launch.SparkSettings(cds_archive=archive))
    assert pending is None and f"-XX:SharedArchiveFile={archive}" in " ".join(cmd)


def test_the_driver_binds_the_address_its_executors_can_reach() -> None:
    """A driver on a cluster's network hands its executors ``spark.driver.host`` (they connect back to it from other
    hosts); a local job or one on a loopback master binds loopback; otherwise Spark finds the host's address."""
    on_host = launch.SparkSettings(master="spark://10.0.0.5:7077", conf={"spark.driver.host": "10.0.0.9"})
    assert on_host.local_ip == "10.0.0.9"
    assert launch.environment({}, on_host.local_ip)["SPARK_LOCAL_IP"] == "10.0.0.9"
    assert launch.SparkSettings().local_ip == "127.0.0.1"
    assert launch.SparkSettings(master="spark://127.0.0.1:7077").local_ip == "127.0.0.1"
    assert launch.SparkSettings(master="spark://spark-1:7077,spark-2:7077").local_ip is None
    assert "SPARK_LOCAL_IP" not in launch.environment({}, None)
