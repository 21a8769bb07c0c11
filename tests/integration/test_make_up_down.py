"""`make down` after `make up` has run the whole solution under load for minutes: it exits 0, says what it waits
for, and no process of the solution is left (issue 25: it printed "still running after 90s" and exited 1 while the
camera simulator and the surveillance service lived on for another half minute). It runs the shipped config, and on
the way checks that the monitor's stalled-ingest and lag alerts do not fire on a fresh `make up` (issue 33).

Every process of this run is found by a marker in its environment, which the children of `make up`, the Spark
jobs' JVMs and their Python workers all inherit: a process started in a new session or re-parented to init after
its parent died is still found.
"""

from __future__ import annotations

import os
import selectors
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from contracts.ports import free_port
from deploy import up
from deploy.processes.make_up import (
    MAKE_UP_PORTS,
    MARK_ENV,
    PIPELINE_ALERTS,
    down,
    fired_alerts,
    marked,
    start_up,
    write_config,
)

START_S = 300.0
"""How long `make up` may take until its ingest job reports its first batches (two Spark JVMs start on a loaded
2-core machine)."""
RUN_S = 45.0
"""How long the solution runs under load after that before `make down`: the Spark jobs have run many batches, the
simulator has filled the bus, the cameras have uploaded segments (a segment is 10 s)."""


def _read_for(proc: subprocess.Popen[bytes], seconds: float, until: str | None = None) -> str:
    """What `make up` prints over `seconds`, or until it prints `until` (read, so its status lines never fill the
    pipe); fails if it exits."""
    assert proc.stdout is not None
    output = ""
    deadline = time.monotonic() + seconds
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        while time.monotonic() < deadline and (until is None or until not in output):
            assert proc.poll() is None, f"make up exited ({proc.returncode}) while running:\n{output}"
            if selector.select(1):
                output += os.read(proc.stdout.fileno(), 65536).decode(errors="replace")
    return output


def _kill_marked(marker: str) -> list[tuple[int, str]]:
    """Kill what is left of the run, naming it."""
    left = marked(marker)
    named = [(p.pid, " ".join(p.cmdline())[:160]) for p in left]
    for p in left:
        p.kill()
    return named


@pytest.mark.slow
@pytest.mark.timeout(up.DOWN_WAIT_S + START_S + RUN_S + 300)
def test_make_down_stops_a_loaded_solution_and_leaves_no_process(tmp_path: Path) -> None:
    ports = {name: free_port() for name in MAKE_UP_PORTS}
    config = write_config(tmp_path, ports, shipped=True)
    data_dir = tmp_path / "data"
    marker = uuid.uuid4().hex
    proc, output = start_up(config, data_dir, ports, pipeline=True, env={MARK_ENV: marker}, timeout=START_S)
    try:
        output += _read_for(proc, START_S, until="records/s in")
        assert "records/s in" in output, output  # the ingest job reports batches: the pipeline runs under load
        output += _read_for(proc, RUN_S)
        fired = {alert["labels"].get("alertname") for alert in fired_alerts(data_dir)}
        names = {p.name() for p in marked(marker)}
        assert "java" in names, names  # the Spark jobs' JVMs are among what must stop
        started = time.monotonic()
        said = down(data_dir, proc, timeout=up.DOWN_WAIT_S)
        took = time.monotonic() - started
    finally:
        if proc.poll() is None:  # failed before a clean stop: stop it all the same, then sweep
            subprocess.run([sys.executable, "-m", "deploy.up", "--data-dir", str(data_dir), "--down"],
                           timeout=up.DOWN_WAIT_S, capture_output=True)
            proc.kill()
            _kill_marked(marker)
    # A fresh make up: the ingest never stalls (the devices start once its job runs) and the monitor keeps up
    # (issue 33). IngestLatencyHigh is left out: in the first two minutes, while the surveillance service and the
    # video ingest job start beside the first batches, the ingest p99 still climbs past 5 s for over 30 s on this
    # 2-core machine; benchmarks/make_up_steady.py reports it.
    must_not_fire = PIPELINE_ALERTS - {"IngestLatencyHigh"}
    assert not fired & must_not_fire, f"fired on a fresh make up: {sorted(fired & must_not_fire)}"
    assert "stopped" in said, said
    assert took < up.DOWN_WAIT_S
    deadline = time.monotonic() + 5  # a JVM's Python workers notice their parent's exit within a moment
    while marked(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = _kill_marked(marker)
    assert not left, f"left running after make down: {left}"
    assert not (data_dir / "up.pid").exists() and not (data_dir / "up.stopping").exists()
