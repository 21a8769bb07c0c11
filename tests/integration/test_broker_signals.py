"""SIGTERM at any point of a broker's start-up shuts it down cleanly (exit 0), never kills it (-15)."""

from __future__ import annotations

import signal
import time
from pathlib import Path

from contracts.processes import spawn
from deploy.processes.broker import BrokerProcess


def test_sigterm_while_starting_shuts_down_cleanly(tmp_path: Path) -> None:
    """The broker writes meta.properties while it is being built, before its port opens; a SIGTERM then (as a
    supervisor stopping it early sends) used to arrive before the handler was installed and killed it."""
    data = tmp_path / "data"
    broker = BrokerProcess(data)
    data.mkdir()
    log_path = tmp_path / "broker.log"
    with open(log_path, "wb") as log:
        proc = spawn(broker.command(), log)
    try:
        deadline = time.monotonic() + 30
        while not (data / "meta.properties").exists():
            assert proc.poll() is None and time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.001)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, log_path.read_text()[-3000:]
        assert "shut down cleanly" in log_path.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
