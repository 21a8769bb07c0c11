"""Run the DR image copier (`python -m dr_mirror.images`) as a real process with its log in a file: what `make up
--dr-site` starts (`deploy/dr_site.py`), and what its test and benchmark start the same way (`kill()` is kill -9;
`start()` again resumes from the group's committed offsets)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from contracts import processes as child


def command(config: Path | None, source_credentials: Path, target_credentials: Path, *, metrics_port: int,
            source_endpoint: str | None = None, target_endpoint: str | None = None, extra: tuple[str, ...] = ()
            ) -> list[str]:
    """The copier's command line: its config (the DR bus and both stores' endpoints), and each store's key file."""
    return [sys.executable, "-m", "dr_mirror.images", *(["--config", str(config)] if config else []),
            "--source-credentials", str(source_credentials), "--target-credentials", str(target_credentials),
            "--metrics-port", str(metrics_port),
            *(["--source-endpoint", source_endpoint] if source_endpoint else []),
            *(["--target-endpoint", target_endpoint] if target_endpoint else []), *extra]


class DrImagesProcess:
    """`python -m dr_mirror.images ARGS`."""

    def __init__(self, args: list[str], log_path: Path) -> None:
        self.args, self.log_path = args, log_path
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> DrImagesProcess:
        self.proc = child.spawn(self.args, self.log_path)
        return self

    def exited(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def kill(self) -> None:
        if self.proc:
            child.kill(self.proc)

    def stop(self, grace: float = 20) -> int | None:
        return None if self.proc is None else child.terminate(self.proc, grace)

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
