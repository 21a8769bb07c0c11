"""Run the surveillance service (`python -m surveillance`) as a real process with its log in a file, for tests
and benchmarks: `start` returns once the service has logged that it is ready."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from contracts import processes as child

METRICS_PORT = re.compile(r"serving /metrics on (?:http://[^:/]+:|port )(\d+)")
"""``contracts.metrics_http``'s log line: the configured port, or the free one that replaced it."""


@dataclass
class ServiceProcess:
    """``python -m surveillance`` with its log in a file; ``start`` waits for ``surveillance ready``."""

    config: Path
    log: Path
    args: tuple[str, ...] = ()
    process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> ServiceProcess:
        offset = self.log.stat().st_size if self.log.exists() else 0
        command = [sys.executable, "-m", "surveillance", "--config", str(self.config), *self.args]
        self.process = child.spawn(command, self.log)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if "surveillance ready" in self.log.read_text(errors="replace")[offset:]:
                return self
            if self.process.poll() is not None:
                raise RuntimeError(f"surveillance exited {self.process.returncode}:\n{self.text()[-3000:]}")
            time.sleep(0.1)
        raise TimeoutError(f"surveillance not ready in {timeout} s:\n{self.text()[-3000:]}")

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def metrics_url(self) -> str:
        """Where this process serves /metrics: the port its log names (a taken configured port is replaced)."""
        ports = METRICS_PORT.findall(self.text())
        assert ports, f"no metrics port in the log:\n{self.text()[-3000:]}"
        return f"http://127.0.0.1:{ports[-1]}/metrics"

    def kill(self) -> None:
        if self.process is not None:
            child.kill(self.process)

    def stop(self, timeout: float = 30.0) -> int | None:
        if self.process is None:
            return None
        return child.terminate(self.process, timeout)
