"""A device's judged capture images over a window of capture time, the input of its ``images`` degradation.

Kept per device beside its heartbeats and counts (:class:`monitoring.health.DeviceTrack`) and persisted with it in
``monitoring_state``: a restarted or standby monitor resumes the sampler from its committed offsets, and without
the window it would judge a device from the few images read since, or hold back for a whole window. Counts are
bucketed by whole second of capture time, so the persisted row stays small (a 2 % sample yields a few images per
device and window) and an image judged twice (a replay after a crash) lands in the same bucket; a replay does
count twice, which a share tolerates and a sample never sees often.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from .image_judge import BAD, RESULTS


@dataclass
class ImageWindow:
    buckets: deque[tuple[int, dict[str, int]]] = field(default_factory=deque)
    """(second of capture time, count per result), oldest first."""

    def add(self, t: float, result: str) -> None:
        second = int(t)
        for bucket, counts in reversed(self.buckets):
            if bucket == second:
                counts[result] = counts.get(result, 0) + 1
                return
            if bucket < second:
                break
        self.buckets.append((second, {result: 1}))
        if len(self.buckets) > 1 and self.buckets[-2][0] > second:  # a late image: keep the buckets in order
            self.buckets = deque(sorted(self.buckets, key=lambda b: b[0]))

    def trim(self, since: float) -> None:
        while self.buckets and self.buckets[0][0] < since:
            self.buckets.popleft()

    def counts(self, since: float) -> dict[str, int]:
        """Per result, the images captured at or after ``since``."""
        total: dict[str, int] = {}
        for second, counts in self.buckets:
            if second >= since:
                for result, n in counts.items():
                    total[result] = total.get(result, 0) + n
        return total

    def bad_share(self, since: float, min_images: int) -> float | None:
        """Share of the images since ``since`` that are missing, undecodable or black; None for fewer than
        ``min_images`` (too few to say anything)."""
        counts = self.counts(since)
        checked = sum(counts.values())
        if checked < min_images:
            return None
        return sum(n for result, n in counts.items() if result in BAD) / checked

    def to_json(self) -> list[list[Any]]:
        return [[second, counts] for second, counts in self.buckets]

    @classmethod
    def from_json(cls, rows: Any) -> ImageWindow:
        """The persisted buckets; anything that is not one (an older or damaged row) is left out."""
        window = cls()
        for row in rows if isinstance(rows, list) else []:
            if (isinstance(row, list) and len(row) == 2 and isinstance(row[0], int) and isinstance(row[1], dict)
                    and all(r in RESULTS and isinstance(n, int) and n > 0 for r, n in row[1].items())):
                window.buckets.append((row[0], dict(row[1])))
        window.buckets = deque(sorted(window.buckets, key=lambda b: b[0]))
        return window
