"""The ingest job survives a query that dies before its first batch, as on a loaded machine.

Spark gives the Python process that plans the bus source a fixed 10 s to connect back
(``PythonWorkerFactory.createSimpleWorker``); at load ~30 it missed that, the query died while INITIALIZING
and the job exited (a DR drill lost 90,944 rows that way). Here the job's worker Python is a wrapper that
starts the first source runner 12 s late: the first query fails exactly that way, the job starts the
query again in the same session from its checkpoint, and every record lands once.
"""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from contracts.processes import ROOT
from deploy.processes.broker import BrokerProcess
from deploy.processes.gateway import start_gateway
from deploy.processes.ingest import simulate
from spark_jobs import launch
from tests.integration._ingest_support import row_counts

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("spark"), pytest.mark.timeout(600)]
RUNNER = "pyspark.sql.streaming.python_streaming_source_runner"


def late_first_runner(tmp_path: Path) -> Path:
    """A PYSPARK_PYTHON that starts the job's first source runner 12 s late, everything else at once."""
    wrapper = tmp_path / "python-late-runner"
    wrapper.write_text(f"""#!/bin/sh
if [ "$2" = "{RUNNER}" ] && mkdir "{tmp_path / 'late-once'}" 2>/dev/null; then sleep 12; fi
exec "{launch.VENV_BIN / 'python'}" "$@"
""")
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    return wrapper


def test_a_query_whose_source_runner_misses_the_connect_back_is_started_again(
        tmp_path: Path, broker: BrokerProcess) -> None:
    summary = simulate(broker.bootstrap, tmp_path, "--count", "600", "--rate", "3000", "--seed", "5")
    gateway = start_gateway(tmp_path / "hbase")
    log = tmp_path / "job.log"
    settings = launch.SparkSettings(conf={"spark.pyspark.python": str(late_first_runner(tmp_path))})
    try:
        with log.open("ab") as out:
            job = launch.submit(ROOT / "spark_jobs" / "ingest_captures.py",
                                ["--bootstrap-server", broker.bootstrap, "--hbase-host", "127.0.0.1",
                                 "--hbase-port", str(gateway.port), "--checkpoint", str(tmp_path / "ckpt"), "--once"],
                                settings, stdout=out, stderr=out)
        try:
            code = job.wait(400)
        finally:
            job.kill()
        text = log.read_text(errors="replace")
        assert code == 0, text[-5000:]
        assert "Python worker failed to connect back" in text  # the first query really died that way
        assert "ingest_captures: query failed (1 in a row" in text
        conn = gateway.connect(timeout=60_000)
        try:
            counts = row_counts(conn)
        finally:
            conn.close()
    finally:
        gateway.kill()
    landed = counts["vehicle"] + counts["face"] + counts["capture_unrecognized"]
    assert landed == sum(summary["produced"].values()) - sum(summary["malformed"].values())
