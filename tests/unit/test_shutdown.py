"""`make up`'s stop (deploy/shutdown.py): steps that end at once in their own threads, a step that fails."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from deploy.shutdown import Shutdown, waiting_for


def test_steps_ending_at_once_all_report_and_the_progress_file_stays_readable(tmp_path: Path) -> None:
    """Two steps ending together wrote the one pending file at once and moved it from under each other: the
    FileNotFoundError stopped `make up` before it stopped its servers (CI: make up exited 1)."""
    stopping = Shutdown(tmp_path)
    go = threading.Barrier(64)
    stopping.phase({f"service {i}": go.wait for i in range(64)})
    assert json.loads((tmp_path / "up.stopping").read_text())["waiting_for"] == []
    stopping.done()
    assert not (tmp_path / "up.stopping").exists()


def test_a_step_that_fails_does_not_stop_the_others(tmp_path: Path) -> None:
    stopping = Shutdown(tmp_path)
    ran: list[str] = []

    def broken() -> None:
        raise OSError("no such process")

    stopping.phase({"broken": broken, "fine": lambda: ran.append("fine")})
    assert ran == ["fine"]
    pid = json.loads((tmp_path / "up.stopping").read_text())["pid"]
    assert waiting_for(tmp_path, pid) == []
