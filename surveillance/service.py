"""The surveillance process: every stage as a thread with its own consumer group, one metrics endpoint.

Stages share nothing but the settings, so each commits independently and a second process simply joins
the same groups (partitions rebalance). A stage that dies takes the process down (exit 1) rather than
leaving it half alive: the supervisor restarts it and the commit-after-ack offsets make that safe.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from . import cloned_stage, stats_stage, watch_stage
from .settings import Settings
from .streams import ensure_topics, service_topics, wait_for_topics

log = logging.getLogger(__name__)
Runner = Callable[[Settings, threading.Event, threading.Event | None], None]
STAGES: dict[str, Runner] = {"watch": watch_stage.run_watch, "cloned": cloned_stage.run_cloned,
                              "stats": stats_stage.run_stats}
"""Stage name -> ``run_<stage>(settings, stop, ready)``."""


class Service:
    def __init__(self, settings: Settings, stages: dict[str, Runner] | None = None) -> None:
        self.settings = settings
        self.stages = dict(STAGES if stages is None else stages)
        self.stop = threading.Event()
        self.failed: list[str] = []
        self._ready = {name: threading.Event() for name in self.stages}
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        """Start every stage once the service's topics exist: created here, or at a standing-by site waited for (the
        mirror creates them, and must be their only writer)."""
        if not self.settings.standing_by():
            ensure_topics(self.settings, service_topics(self.settings))
        elif not wait_for_topics(self.settings, service_topics(self.settings), self.stop):
            return
        for name, runner in self.stages.items():
            thread = threading.Thread(target=self._run, args=(name, runner), name=f"stage-{name}")
            thread.start()
            self._threads.append(thread)

    def _run(self, name: str, runner: Runner) -> None:
        try:
            runner(self.settings, self.stop, self._ready[name])
        except Exception:
            log.exception("stage %s failed: stopping the service", name)
            self.failed.append(name)
            self.stop.set()

    def wait_ready(self) -> bool:
        """True once every stage has applied its commands and subscribed (False if one failed first)."""
        for event in self._ready.values():
            while not event.wait(0.1):
                if self.stop.is_set():
                    return False
        return not self.stop.is_set()

    def join(self) -> None:
        for thread in self._threads:
            thread.join()
