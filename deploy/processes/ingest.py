"""Run the capture pipeline's processes for the tests and the benchmarks: `simulate` runs the simulator
(``python -m ingest.simulate``) to the end, `ingest_job` starts the Spark ingest job (``spark_jobs/ingest_captures.py``)
with spark-submit.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from contracts.processes import ROOT
from spark_jobs import launch


def simulate(bootstrap: str, tmp: Path, *args: str, timeout: float = 120) -> dict[str, Any]:
    """Run ``python -m ingest.simulate`` to the end; returns its JSON summary line."""
    out = subprocess.run(
        [sys.executable, "-m", "ingest.simulate", "--bootstrap-server", bootstrap, "--map", str(tmp / "map.json"),
         "--status-interval", "0", *args],
        cwd=ROOT, capture_output=True, timeout=timeout, check=False)
    if out.returncode != 0:
        raise RuntimeError(out.stderr.decode(errors="replace")[-3000:])
    return json.loads(out.stdout.decode().strip().splitlines()[-1])


def ingest_job(bootstrap: str, hbase_port: int, checkpoint: Path, log: Path, *args: str,
               settings: launch.SparkSettings | None = None) -> launch.SparkJob:
    """Start the ingest job with spark-submit (light local settings and the shared CDS archive, unless ``settings``
    name a cluster)."""
    handle = log.open("ab")
    return launch.submit(
        ROOT / "spark_jobs" / "ingest_captures.py",
        ["--bootstrap-server", bootstrap, "--hbase-host", "127.0.0.1", "--hbase-port", str(hbase_port),
         "--checkpoint", str(checkpoint), *args],
        settings, stdout=handle, stderr=subprocess.STDOUT, progress=lambda line: handle.write(f"{line}\n".encode()))
