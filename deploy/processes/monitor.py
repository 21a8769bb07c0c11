"""Run the monitor (`python -m monitoring`) as a real process with its log in a file, for tests and benchmarks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from contracts import processes as child


class MonitorProcess:
    def __init__(self, config: Path, log_path: Path) -> None:
        self.config, self.log_path = config, log_path
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> MonitorProcess:
        self.proc = child.spawn([sys.executable, "-m", "monitoring", "--config", str(self.config)], self.log_path)
        return self

    def kill(self) -> None:
        if self.proc:
            child.kill(self.proc)

    def stop(self) -> int | None:
        return child.terminate(self.proc, 20) if self.proc else None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")
