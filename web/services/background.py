"""The console's background threads: one named daemon thread, the event that asks it to stop, start and stop.

Several services keep a thread beside the app (the lag samplers, the audit loader, the face search follower, the
event hub, the live captures follower). :class:`BackgroundThread` is what they share: ``start()`` starts one
thread (never a second while one runs), ``stop(timeout)`` asks it to stop and waits for it, and the thread's own
loop asks :meth:`BackgroundThread.wait` or :attr:`BackgroundThread.stopping` whether it should go on.

:class:`Sampler` is the periodic case: a step every ``interval_s`` until stopped, an expected failure (a backend
that does not answer) logged as skipped, any other logged with its stack trace, and the loop going on either way.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

MIN_PAUSE_S = 0.1
"""A sampler's shortest wait between two steps (a step slower than its interval does not spin)."""


class BackgroundThread:
    """One named daemon thread running ``target``, and its stop event."""

    def __init__(self, name: str, target: Callable[[], None]) -> None:
        self.name = name
        self._target = target
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def stopping(self) -> bool:
        """True once :meth:`stop` was called (until the next :meth:`start`)."""
        return self._stop.is_set()

    def wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``, woken early by :meth:`stop`; True when asked to stop."""
        return self._stop.wait(seconds)

    def start(self) -> None:
        """Start the thread, unless one is running already."""
        if self.running:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._target, name=self.name, daemon=True)
        self._thread.start()

    def stop(self, timeout: float) -> None:
        """Ask the thread to stop and wait up to ``timeout`` seconds for it (also before any start: a loop run
        directly then sees it is stopping)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None


class Sampler(BackgroundThread):
    """``step()`` every ``interval_s`` (less the step's own time, at least :data:`MIN_PAUSE_S`) until stopped.

    ``what`` names the step in ``log``: an exception of ``expected`` is logged at ``expected_level`` as
    ``"<what> skipped: <error>"``, any other with its stack trace as ``"<what> failed"``; the loop goes on.
    """

    def __init__(self, name: str, interval_s: float, step: Callable[[], object], *, log: logging.Logger, what: str,
                 expected: tuple[type[Exception], ...] = (), expected_level: int = logging.WARNING) -> None:
        super().__init__(name, self._run)
        self.interval_s = interval_s
        self._step = step
        self._log = log
        self._what = what
        self._expected = expected
        self._expected_level = expected_level

    def _run(self) -> None:
        while not self.stopping:
            started = time.monotonic()
            try:
                self._step()
            except self._expected as exc:
                self._log.log(self._expected_level, "%s skipped: %s", self._what, exc)
            except Exception:
                self._log.exception("%s failed", self._what)
            self.wait(max(self.interval_s - (time.monotonic() - started), MIN_PAUSE_S))
