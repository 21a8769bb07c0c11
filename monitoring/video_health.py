"""A camera's schedule and judged footage, the input of its ``video`` degradation and of its gap (issue 28).

Kept per camera on its :class:`monitoring.health.DeviceTrack` and persisted with it in ``monitoring_state``, so a
restarted or standby monitor knows which segments were judged already (the watch resumes after ``newest``) and
judges the camera by the same segments as before. ``listed`` (when the watch last listed the camera's segments)
is not persisted: until the new monitor has listed the bucket itself, a camera's gap is neither found nor cleared,
as a device's silence waits for the monitor to catch up with the heartbeats.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from .video_judge import BAD, RESULTS

KEEP = 8
"""Judged segments kept per camera (more than any sensible ``bad_segments``)."""
GAP = "gap"
"""A camera's problem when its schedule has a gap (no new segment for ``gap_factor * segment_s``)."""


@dataclass
class VideoWindow:
    newest: float | None = None
    """Start time (epoch seconds, from its key) of the newest segment the camera uploaded, judged or not."""
    listed: float | None = None
    """When the watch last listed the camera's segments (not persisted)."""
    judged: deque[tuple[float, str]] = field(default_factory=lambda: deque(maxlen=KEEP))
    """(segment start, result), oldest first."""

    def seen(self, newest: float | None, at: float) -> None:
        """A listing at ``at`` found the camera's newest segment beginning at ``newest`` (None: none)."""
        self.listed = at
        if newest is not None and (self.newest is None or newest > self.newest):
            self.newest = newest

    def add(self, start: float, result: str) -> None:
        """One judged segment; kept in the order the segments began (a late one lands in its place)."""
        if self.judged and self.judged[-1][0] > start:
            self.judged = deque(sorted([*self.judged, (start, result)])[-KEEP:], maxlen=KEEP)
        else:
            self.judged.append((start, result))

    def age(self, now: float, watched_since: float) -> float:
        """Seconds since the newest segment began; since the camera was first expected when it never uploaded."""
        return now - (watched_since if self.newest is None else self.newest)

    def gap(self, now: float, watched_since: float, limit_s: float, stale_s: float) -> bool | None:
        """Whether the camera's last listing showed a gap: its newest segment then had begun more than ``limit_s``
        before. Judged as of the listing, not of ``now``: between listings, or while the store does not answer, a
        segment may have arrived that no listing has shown yet. None while the listing is older than ``stale_s``
        (or this monitor has not listed yet): nothing is found or cleared then."""
        if self.listed is None or now - self.listed > stale_s:
            return None
        return self.age(self.listed, watched_since) > limit_s

    def bad_streak(self) -> int:
        """Judged segments in a row, newest last, that are bad."""
        streak = 0
        for _, result in reversed(self.judged):
            if result not in BAD:
                break
            streak += 1
        return streak

    def footage(self, bad_segments: int) -> str | None:
        """The newest result when the newest ``bad_segments`` judged segments are all bad; ``""`` when the newest is
        good; None when neither can be said (nothing judged, or a bad streak still shorter)."""
        if not self.judged:
            return None
        newest = self.judged[-1][1]
        if newest not in BAD:
            return ""
        return newest if self.bad_streak() >= bad_segments else None

    def to_json(self) -> dict[str, Any]:
        return {"newest": self.newest, "judged": [[start, result] for start, result in self.judged]}

    @classmethod
    def from_json(cls, data: Any) -> VideoWindow:
        """The persisted window; anything that is not one (an older or damaged row) is left out."""
        window = cls()
        if not isinstance(data, dict):
            return window
        newest = data.get("newest")
        if isinstance(newest, int | float) and not isinstance(newest, bool):
            window.newest = float(newest)
        rows = data.get("judged")
        for row in rows if isinstance(rows, list) else []:
            if (isinstance(row, list) and len(row) == 2 and isinstance(row[0], int | float)
                    and not isinstance(row[0], bool) and row[1] in RESULTS):
                window.judged.append((float(row[0]), row[1]))
        return window
