"""A tiny time-bounded cache for per-request lookups (users, sessions).

Each console process keeps its own: a change made through this process invalidates its entry at
once; a change made elsewhere (another console, the ``users`` CLI) is seen within ``ttl_s``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class TTLCache(Generic[V]):
    def __init__(self, ttl_s: float, max_entries: int = 10_000) -> None:
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self._entries: dict[Hashable, tuple[float, V]] = {}
        self._lock = threading.Lock()

    def get(self, key: Hashable, load: Callable[[], V]) -> V:
        now = time.monotonic()
        with self._lock:
            hit = self._entries.get(key)
            if hit is not None and hit[0] > now:
                return hit[1]
        value = load()
        with self._lock:
            if len(self._entries) >= self.max_entries:
                self._entries.clear()  # bounded memory beats a perfect hit rate here
            self._entries[key] = (now + self.ttl_s, value)
        return value

    def invalidate(self, key: Hashable) -> None:
        with self._lock:
            self._entries.pop(key, None)
