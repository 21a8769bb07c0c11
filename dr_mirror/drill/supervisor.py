"""The drill's supervisor: restarts a process that exits while the drill still needs it, as an operations team's
process supervisor (systemd, Kubernetes) would in a real machine room.

A drill measures what its scenario breaks, not what a loaded machine breaks by accident: an ingest job whose
Python worker missed Spark's connect-back, or a mirror that fell over, would otherwise turn into "records
lost" in the report. Each restart is bounded (``limit`` per process) and counted, so the report says how often
it happened. What a scenario kills on purpose (the lost primary room, the mirror in mirror-crash's outage) is
unwatched first and never restarted.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Watched:
    exited: Callable[[], int | None]  # the exit status, None while it runs
    restart: Callable[[], None]  # starts it again where it left off (same checkpoint / the target's log end)


class Supervisor(threading.Thread):
    """Polls the watched processes every ``interval`` seconds and restarts one that exited, ``limit`` times at most."""

    def __init__(self, limit: int, interval: float = 1.0,
                 on_restart: Callable[[str, int], None] | None = None) -> None:
        super().__init__(daemon=True, name="drill-supervisor")
        self.limit, self.interval, self.on_restart = limit, interval, on_restart
        self.watched: dict[str, Watched] = {}
        self.restarts: Counter[str] = Counter()
        self.history: list[dict[str, Any]] = []  # every exit seen: when, what, its status, restarted or given up
        self.lock = threading.Lock()  # a check and its restart are one step: unwatch() never races a restart
        self.stopping = threading.Event()

    def watch(self, name: str, exited: Callable[[], int | None], restart: Callable[[], None]) -> None:
        with self.lock:
            self.watched[name] = Watched(exited, restart)

    def unwatch(self, name: str) -> None:
        """From here on the process may exit (or be killed) without being restarted."""
        with self.lock:
            self.watched.pop(name, None)

    def run(self) -> None:
        while not self.stopping.wait(self.interval):
            self.check()

    def check(self) -> None:
        with self.lock:
            for name, watched in list(self.watched.items()):
                code = watched.exited()
                if code is None:
                    continue
                given_up = self.restarts[name] >= self.limit
                self.history.append({"at": time.time(), "process": name, "exit_status": code,
                                     "restarted": not given_up})
                if given_up:  # the report shows it; restarting forever would hide a real fault
                    del self.watched[name]
                    continue
                self.restarts[name] += 1
                watched.restart()
                if self.on_restart is not None:
                    self.on_restart(name, self.restarts[name])

    def summary(self) -> dict[str, Any]:
        """For the report: restarts per process, and the processes given up on after ``limit`` restarts."""
        return {"restarts": dict(self.restarts),
                "gave_up_on": sorted({h["process"] for h in self.history if not h["restarted"]})}
