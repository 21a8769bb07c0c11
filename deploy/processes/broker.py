"""Run `bus broker` as a real subprocess on free ports, for integration tests, benchmarks and the drills."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from pathlib import Path

import psutil

from contracts import processes as child
from contracts.ports import free_port, wait_for_port


class BrokerProcess:
    """A broker on free ports with its own data dir; `kill()` is kill -9, `restart()` reuses the data."""

    def __init__(self, data_dir: Path, overrides: dict[str, str] | None = None) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        self.controller_port = free_port()
        self.overrides = {
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "log.dirs": str(data_dir),
            "group.initial.rebalance.delay.ms": "0",
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            **(overrides or {}),
        }
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir.parent / f"broker-{self.port}.log"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "bus", "broker"]
        for key, value in self.overrides.items():
            cmd += ["--override", f"{key}={value}"]
        return cmd

    def start(self, timeout: float = 20.0) -> BrokerProcess:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.proc = child.spawn(self.command(), self.log_path)
        try:
            wait_for_port(self.port, timeout)
            self._wait_until_it_listens(timeout)
        except TimeoutError:
            self.stop()
            raise RuntimeError(f"broker did not start:\n{self.log_path.read_text()[-3000:]}") from None
        return self

    def _wait_until_it_listens(self, timeout: float) -> None:
        """Something answers on the port; make sure it is this broker (another process may hold the port, and
        then the broker exits with "address already in use")."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            with contextlib.suppress(psutil.Error):
                listening = psutil.Process(self.proc.pid).net_connections(kind="tcp")
                if any(c.status == psutil.CONN_LISTEN and c.laddr.port == self.port for c in listening):
                    return
            time.sleep(0.05)
        raise TimeoutError

    def kill(self) -> None:
        """kill -9: no shutdown hooks run, like a crash."""
        if self.proc:
            child.kill(self.proc)

    def stop(self, timeout: float = 15.0) -> int | None:
        if not self.proc:
            return None
        return child.terminate(self.proc, timeout)

    def restart(self) -> BrokerProcess:
        self.stop()
        return self.start()

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
