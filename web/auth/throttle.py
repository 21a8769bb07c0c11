"""Login throttle: consecutive failed logins for one key lock it out for a growing time.

:class:`web.auth.Auth` keeps two: one keyed by (client address, username), so guessing one account's
password from one address is slowed while the same account's owner logging in from another address is
not locked out by someone else's failures; and one keyed by the client address alone with more free
failures, so spraying many names from one address is slowed too.

After ``free_failures`` failures in a row, each further failure locks the name for
``base_s * 2**(extra failures)`` seconds, capped at ``max_s``; a login during the lock is refused with
429 and ``Retry-After`` without checking the password (so guessing gains nothing). A success resets the
count; a name with no failure for ``forget_s`` is forgotten.

The state is in memory, per console process: a restart forgets it, and two console processes each
count on their own. That is acceptable for one console per site; a shared store would be needed
behind a load balancer. Unknown usernames are throttled like real ones, so the answer does not reveal
which names exist; the table is bounded (oldest entries dropped) so random names cannot grow it.
(Below, "username" is whatever key the caller counts by.)
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass


@dataclass
class _Failures:
    count: int
    locked_until: float
    last: float


class LoginThrottle:
    def __init__(self, free_failures: int = 5, base_s: float = 1.0, max_s: float = 300.0,
                 forget_s: float = 3600.0, max_names: int = 10_000) -> None:
        self.free_failures = free_failures
        self.base_s = base_s
        self.max_s = max_s
        self.forget_s = forget_s
        self.max_names = max_names
        self._state: dict[str, _Failures] = {}
        self._lock = threading.Lock()

    def retry_after(self, username: str) -> int:
        """Seconds until ``username`` may try again (0: now)."""
        now = time.monotonic()
        with self._lock:
            state = self._state.get(username)
            if state is None:
                return 0
            if now - state.last > self.forget_s:
                del self._state[username]
                return 0
            return max(0, math.ceil(state.locked_until - now))

    def failed(self, username: str) -> int:
        """Record a failure; returns the lock it caused in seconds (0: none yet)."""
        now = time.monotonic()
        with self._lock:
            state = self._state.get(username)
            if state is None or now - state.last > self.forget_s:
                if len(self._state) >= self.max_names:
                    oldest = min(self._state, key=lambda name: self._state[name].last)
                    del self._state[oldest]
                state = self._state[username] = _Failures(0, 0.0, now)
            state.count += 1
            state.last = now
            extra = state.count - self.free_failures
            if extra < 0:
                return 0
            lock = min(self.max_s, self.base_s * 2 ** extra)
            state.locked_until = now + lock
            return math.ceil(lock)

    def succeeded(self, username: str) -> None:
        with self._lock:
            self._state.pop(username, None)
