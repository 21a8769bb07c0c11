"""The face watchlist: every watched embedding in one float32 matrix, a batch of faces = one matrix product.

Embeddings are L2-normalised (the contract normalises watched ones, records arrive normalised), so the
cosine similarity of a batch (B x 128) against the watchlist (N x 128) is ``batch @ matrix.T``. Rows are
slots: a removed watch frees its slot (its threshold becomes +inf so it can never match) and the next
added watch reuses it, so adding or removing never rebuilds the matrix; it only grows by doubling.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from contracts.records import FEATURE_DIM
from contracts.surveillance import WatchCommand


@dataclass(frozen=True)
class FaceMatch:
    watch: WatchCommand
    score: float


class FaceWatchlist:
    def __init__(self, capacity: int = 1024) -> None:
        self._matrix = np.zeros((capacity, FEATURE_DIM), dtype=np.float32)
        self._thresholds = np.full(capacity, np.inf, dtype=np.float32)
        self._slots: dict[str, int] = {}
        self._watches: list[WatchCommand | None] = [None] * capacity
        self._free: list[int] = []
        self._used = 0  # slots below this have been handed out at least once

    def __len__(self) -> int:
        return len(self._slots)

    def add(self, watch: WatchCommand) -> None:
        """Add or replace a face watch (same id: same slot, new embedding and threshold)."""
        if watch.feature is None:
            raise ValueError(f"watch {watch.watch_id} is not a face watch")
        slot = self._slots.get(watch.watch_id)
        if slot is None:
            slot = self._free.pop() if self._free else self._next_slot()
            self._slots[watch.watch_id] = slot
        self._matrix[slot] = np.frombuffer(watch.feature, dtype="<f4")
        self._thresholds[slot] = watch.threshold
        self._watches[slot] = watch

    def remove(self, watch_id: str) -> bool:
        slot = self._slots.pop(watch_id, None)
        if slot is None:
            return False
        self._matrix[slot] = 0.0
        self._thresholds[slot] = np.inf
        self._watches[slot] = None
        self._free.append(slot)
        return True

    def _next_slot(self) -> int:
        if self._used == len(self._watches):
            capacity = 2 * len(self._watches)
            self._matrix = np.resize(self._matrix, (capacity, FEATURE_DIM))
            self._matrix[self._used:] = 0.0
            self._thresholds = np.concatenate([self._thresholds, np.full(capacity - self._used, np.inf, np.float32)])
            self._watches.extend([None] * (capacity - self._used))
        self._used += 1
        return self._used - 1

    def match(self, batch: np.ndarray) -> list[list[FaceMatch]]:
        """For each row of ``batch`` (B x 128 float32), the watches whose threshold its similarity reaches."""
        found: list[list[FaceMatch]] = [[] for _ in range(len(batch))]
        if not self._slots or not len(batch):
            return found
        scores = batch @ self._matrix[:self._used].T
        rows, slots = np.nonzero(scores >= self._thresholds[:self._used])
        for row, slot in zip(rows.tolist(), slots.tolist(), strict=True):
            watch = self._watches[slot]
            assert watch is not None  # a free slot's threshold is +inf
            found[row].append(FaceMatch(watch, float(scores[row, slot])))
        return found
