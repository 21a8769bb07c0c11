"""Stopping what `make up` started: bounded, in dependency order, and visible to `make down` while it runs.

Every step has a bound (a child gets SIGTERM, then SIGKILL after its grace period; a Spark job its own
graceful stop, then its process group is killed), so a stop always ends. Steps that do not depend on each
other run at once: one after another, two Spark jobs, a DR site and a dozen services took longer than an
operator waits. While it runs, ``DATA/up.stopping`` names what is still being waited for, which
``make down`` prints instead of guessing how long a stop may take.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

SERVICE_GRACE_S = 20.0
"""How long a service has between SIGTERM and SIGKILL (each commits its offsets and flushes within seconds)."""


def progress_path(data_dir: Path) -> Path:
    return data_dir / "up.stopping"


class Shutdown:
    """Runs named stop steps, a phase at a time, and keeps ``DATA/up.stopping`` up to date meanwhile."""

    def __init__(self, data_dir: Path, clock: Callable[[], float] = time.time) -> None:
        self.path = progress_path(data_dir)
        self.clock = clock
        self.started = clock()
        self.waiting: dict[str, float] = {}
        self.lock = threading.Lock()

    def phase(self, steps: Mapping[str, Callable[[], object]]) -> None:
        """Run ``steps`` (name -> stop) at once and return when all have; a step that raises is reported, not fatal:
        the steps after it must still run, or a failed stop would leave the rest of the solution running."""
        if not steps:
            return
        with self.lock:
            self.waiting.update(dict.fromkeys(steps, self.clock()))
        self._write()
        with ThreadPoolExecutor(max_workers=len(steps)) as pool:
            list(pool.map(lambda item: self._run(*item), steps.items()))

    def _run(self, name: str, stop: Callable[[], object]) -> None:
        try:
            stop()
        except Exception as exc:  # one step's failure must not leave the other processes running
            print(f"stopping {name}: {exc}", flush=True)
        with self.lock:
            self.waiting.pop(name, None)
        self._write()

    def _write(self) -> None:
        """Under the lock: steps end in threads of their own, and two writers of the one pending file would move it
        from under each other (a FileNotFoundError that stopped `make up` before it stopped its servers)."""
        with self.lock:
            state = {"pid": os.getpid(), "since": self.started, "waiting_for": sorted(self.waiting)}
            pending = self.path.with_suffix(".new")
            pending.write_text(json.dumps(state))
            os.replace(pending, self.path)

    def done(self) -> None:
        self.path.unlink(missing_ok=True)


def waiting_for(data_dir: Path, pid: int) -> list[str] | None:
    """What the stopping `make up` with ``pid`` still waits for; None before it has begun to stop (or if the file
    is another run's)."""
    try:
        state = json.loads(progress_path(data_dir).read_text())
    except (FileNotFoundError, ValueError):
        return None
    if not isinstance(state, dict) or state.get("pid") != pid:
        return None
    names = state.get("waiting_for")
    return [str(name) for name in names] if isinstance(names, list) else None


def describe(names: Iterable[str]) -> str:
    listed = list(names)
    return ", ".join(listed) if listed else "its own exit"
