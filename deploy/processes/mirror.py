"""Run the mirror (`python -m dr_mirror`) as a real process with its log in a file, for its tests, its benchmark
and the failover drills (which restart it after a kill: `start()` again starts it anew)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from contracts import processes as child


class MirrorProcess:
    """`python -m dr_mirror ARGS` (plus ``--metrics-port`` when given); `kill()` is kill -9."""

    def __init__(self, args: list[str], log_path: Path, metrics_port: int | None = None) -> None:
        self.args = args
        self.log_path = log_path
        self.metrics_port = metrics_port
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> MirrorProcess:
        metrics = [] if self.metrics_port is None else ["--metrics-port", str(self.metrics_port)]
        self.proc = child.spawn([sys.executable, "-m", "dr_mirror", *self.args, *metrics], self.log_path)
        return self

    def exited(self) -> int | None:
        """The mirror's exit status, None while it runs (or before it started)."""
        return None if self.proc is None else self.proc.poll()

    def kill(self) -> None:
        if self.proc:
            child.kill(self.proc)

    def stop(self) -> int | None:
        return None if self.proc is None else child.terminate(self.proc, 20)

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
