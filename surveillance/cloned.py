"""Cloned plates (套牌): one plate seen at two places no car could drive between in the time between.

The detector is pure (no I/O): the stage feeds it the sightings of the plates its partitions of the
repartition topic carry, and it returns the suspicious pairs. Per plate it keeps the latest
sightings sorted by capture time, bounded twice: by ``max_per_plate`` and by ``horizon_s`` behind the
newest capture time seen (stream time). A new sighting is judged only against its neighbours in time
(the sighting just before and just after it): if every consecutive pair is drivable at the speed
limit, then by the triangle inequality every pair is, so neighbours find every impossible trip and a
plate seen a hundred times costs two distance lookups, not a hundred.

Two sightings are never a clone when they are at the same checkpoint (a car stuck at a red light is
seen twice), or closer than ``min_distance_km`` (the cameras of one crossroad face different ways a
few hundred metres apart at most and the devices' clocks differ by a second or so: at 300 m in one
second any car would look like a rocket). The time between sightings is floored at one second for
the same reason, which also keeps the implied speed finite.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable
from dataclasses import dataclass

MIN_INTERVAL_MS = 1000
"""Capture clocks agree to about a second: a shorter interval is judged as one second."""


@dataclass(frozen=True, order=True)
class Sighting:
    """One valid plate capture, as the repartition topic carries it (ordered by capture time, then id)."""

    capture_ms: int
    record_id: str
    plate: str
    checkpoint_id: str
    capture_time: str
    """The capture's own ISO-8601 time, carried through unchanged into the hit."""


@dataclass(frozen=True)
class Clone:
    """An impossible trip: ``first`` is the earlier sighting."""

    first: Sighting
    second: Sighting
    distance_km: float
    speed_kmh: float

    @property
    def plate(self) -> str:
        return self.first.plate


@dataclass(frozen=True)
class CloneRules:
    speed_limit_kmh: float = 200.0
    min_distance_km: float = 0.5
    horizon_s: float = 900.0
    max_per_plate: int = 16

    def __post_init__(self) -> None:
        for name in ("speed_limit_kmh", "horizon_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, not {getattr(self, name)!r}")
        if self.min_distance_km < 0:
            raise ValueError(f"min_distance_km must not be negative, not {self.min_distance_km!r}")
        if self.max_per_plate < 2:
            raise ValueError(f"max_per_plate must be at least 2, not {self.max_per_plate!r}")


class CloneDetector:
    """Per-plate sighting state and the impossible-trip judgement."""

    def __init__(self, rules: CloneRules, distance_km: Callable[[str, str], float | None]) -> None:
        self.rules = rules
        self.distance_km = distance_km
        self.plates: dict[str, list[Sighting]] = {}
        self._expiry: list[tuple[int, str]] = []
        """(newest capture ms of a plate when pushed, plate): a lazy heap, stale entries skipped."""
        self.stream_ms = 0
        self.sightings = 0

    def observe(self, sighting: Sighting) -> list[Clone]:
        """Add a sighting; return the impossible trips it forms with its neighbours in time."""
        self.stream_ms = max(self.stream_ms, sighting.capture_ms)
        horizon_ms = int(self.rules.horizon_s * 1000)
        history = self.plates.get(sighting.plate)
        if history is None:
            history = self.plates[sighting.plate] = []
        elif sighting in history:
            return []  # the same record again (a replay): judged already
        index = bisect.bisect(history, sighting)
        neighbours = [history[i] for i in (index - 1, index) if 0 <= i < len(history)]
        clones = [clone for other in neighbours
                  if abs(other.capture_ms - sighting.capture_ms) <= horizon_ms
                  and (clone := self.judge(other, sighting)) is not None]
        history.insert(index, sighting)
        cutoff = self.stream_ms - horizon_ms
        while len(history) > self.rules.max_per_plate or (len(history) > 1 and history[0].capture_ms < cutoff):
            del history[0]
        heapq.heappush(self._expiry, (history[-1].capture_ms, sighting.plate))
        self.sightings += 1
        self.expire()
        return clones

    def judge(self, a: Sighting, b: Sighting) -> Clone | None:
        if a.checkpoint_id == b.checkpoint_id:
            return None
        distance = self.distance_km(a.checkpoint_id, b.checkpoint_id)
        if distance is None or distance < self.rules.min_distance_km:
            return None
        first, second = (a, b) if a <= b else (b, a)
        hours = max(second.capture_ms - first.capture_ms, MIN_INTERVAL_MS) / 3_600_000
        speed = distance / hours
        if speed <= self.rules.speed_limit_kmh:
            return None
        return Clone(first, second, round(distance, 3), round(speed, 1))

    def expire(self) -> None:
        """Forget plates whose newest sighting is older than the horizon behind stream time."""
        cutoff = self.stream_ms - int(self.rules.horizon_s * 1000)
        while self._expiry and self._expiry[0][0] < cutoff:
            newest, plate = heapq.heappop(self._expiry)
            history = self.plates.get(plate)
            if history is not None and history[-1].capture_ms <= newest:
                del self.plates[plate]

    def __len__(self) -> int:
        """Sightings held (the bounded state's size)."""
        return sum(len(h) for h in self.plates.values())
