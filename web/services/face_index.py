"""The face search index: every searchable face capture's feature, partitioned by city day, searched exactly.

One partition per CITY_TZ day holds a faiss ``IndexFlatIP`` of that day's features (L2-normalised, so the inner
product is the cosine) and, in insertion order, each face's record id, capture time and checkpoint. A search asks
``range_search(min_score)`` of the days its time range touches and keeps the hits inside the range and place:

* exact, not approximate: a flat index compares the query with every face of the day, so recall against a numpy
  cosine search is 1.0 up to float rounding at the threshold. HNSW would answer faster on tens of millions of faces,
  but it misses neighbours (its recall falls as the graph grows), cannot drop a day without rebuilding, and costs
  ~4x the memory in links; at the city's scale (500,000 faces over a month: p50 31 ms, p99 108 ms on one core,
  336 ms with a full CI run beside it, ``benchmarks/search_faces.py``) a flat scan is fast enough and never wrong;
* ``range_search`` rather than top-k: "everyone who looks like this" has no natural k (a regular is seen hundreds
  of times a month), and the threshold is what the operator chose;
* by day, so retention (``[retention] captures_days``) drops whole partitions (free the index, forget the ids)
  instead of deleting vectors one by one, and a search over a week touches seven small indexes, not the month.

The index is pure logic over numpy and faiss: :mod:`web.services.face_follow` fills it from HBase and the bus.
Every method is safe from several threads (one lock, held for the length of one search or one batch added).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

import faiss
import numpy as np

from contracts.records import CITY_TZ, FEATURE_DIM

DAY_MS = 86_400_000
_OFFSET_MS = int(CITY_TZ.utcoffset(None).total_seconds() * 1000)
UNIT_TOLERANCE = 1e-3
"""How far from 1 a feature's norm may be: the record schema's own check (``contracts.records``)."""

faiss.omp_set_num_threads(1)
# One query is a few milliseconds of one core; faiss's OpenMP threads would spin on the console's other core, which
# the console's requests and the co-located broker need (the surveillance service pins its BLAS likewise).


def city_day(capture_ms: int) -> int:
    """The CITY_TZ calendar day of an instant, as days since 1970-01-01 (the partition key)."""
    return (capture_ms + _OFFSET_MS) // DAY_MS


def day_end_ms(day: int) -> int:
    """The first instant after ``day`` (CITY_TZ midnight that ends it)."""
    return (day + 1) * DAY_MS - _OFFSET_MS


def unit_vector(values: Iterable[float]) -> np.ndarray:
    """A feature as a 1 x 128 float32 row scaled to norm 1; ValueError unless it has 128 finite components of norm
    1 within the record schema's tolerance. The index compares by inner product, which is the cosine only between
    unit vectors, and the rescale makes a face's score with itself 1.0, not 0.9995."""
    row = np.asarray(list(values), dtype=np.float32).reshape(1, -1)
    if row.shape[1] != FEATURE_DIM:
        raise ValueError(f"a face feature has {FEATURE_DIM} components, not {row.shape[1]}")
    if not np.isfinite(row).all():
        raise ValueError("the feature holds NaN or infinity")
    norm = float(np.linalg.norm(row.astype(np.float64)))
    if abs(norm - 1.0) > UNIT_TOLERANCE:
        raise ValueError(f"the feature is not normalised (its length is {norm:.4f}, not 1)")
    return row / np.float32(norm)


@dataclass(frozen=True)
class Face:
    """One searchable face capture."""

    record_id: str
    capture_ms: int
    checkpoint_id: str
    vector: np.ndarray
    """1 x 128 float32, unit length (:func:`unit_vector`)."""


@dataclass(frozen=True)
class Hit:
    record_id: str
    score: float
    capture_ms: int
    checkpoint_id: str


@dataclass
class _Day:
    index: faiss.IndexFlatIP = field(default_factory=lambda: faiss.IndexFlatIP(FEATURE_DIM))
    record_ids: list[str] = field(default_factory=list)
    capture_ms: list[int] = field(default_factory=list)
    checkpoints: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Where:
    """A search's time range ``[start_ms, end_ms)`` and optional place (a checkpoint, or a district's checkpoints:
    the district code is a checkpoint id's first part)."""

    start_ms: int
    end_ms: int
    checkpoint: str | None = None
    district: str | None = None

    def holds(self, capture_ms: int, checkpoint_id: str) -> bool:
        if not self.start_ms <= capture_ms < self.end_ms:
            return False
        if self.checkpoint is not None and checkpoint_id != self.checkpoint:
            return False
        return self.district is None or checkpoint_id.split("#", 1)[0] == self.district


class FaceIndex:
    """Face features by city day, deduplicated by record id (HBase's scan and the bus overlap on purpose)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._days: dict[int, _Day] = {}
        self._where: dict[str, tuple[int, int]] = {}
        """record id -> (day, position in that day's index)."""

    def __len__(self) -> int:
        return len(self._where)

    @property
    def days(self) -> int:
        return len(self._days)

    def add(self, faces: Iterable[Face]) -> int:
        """Index the faces not indexed yet (one faiss ``add`` per day touched); how many were new."""
        fresh: dict[int, list[Face]] = {}
        with self._lock:
            seen: set[str] = set()
            for face in faces:
                if face.record_id in self._where or face.record_id in seen:
                    continue
                seen.add(face.record_id)
                fresh.setdefault(city_day(face.capture_ms), []).append(face)
            for day, batch in fresh.items():
                part = self._days.setdefault(day, _Day())
                first = len(part.record_ids)
                part.index.add(np.vstack([f.vector for f in batch]))
                for offset, face in enumerate(batch):
                    part.record_ids.append(face.record_id)
                    part.capture_ms.append(face.capture_ms)
                    part.checkpoints.append(face.checkpoint_id)
                    self._where[face.record_id] = (day, first + offset)
        return sum(len(batch) for batch in fresh.values())

    def vector_of(self, record_id: str) -> np.ndarray | None:
        """The indexed feature of a face capture (1 x 128), or None when the index does not hold it."""
        with self._lock:
            found = self._where.get(record_id)
            if found is None:
                return None
            day, position = found
            return self._days[day].index.reconstruct(position).reshape(1, -1)

    def search(self, query: np.ndarray, where: Where, min_score: float, limit: int) -> tuple[list[Hit], int]:
        """The faces inside ``where`` whose cosine with ``query`` is at least ``min_score``: the best ``limit`` by
        score (ties: older first), and how many matched in all."""
        found: list[Hit] = []
        # range_search keeps scores > radius (in float32); the API promises >= min_score
        threshold = float(np.nextafter(np.float32(min_score), np.float32(-np.inf)))
        with self._lock:
            for day in range(city_day(where.start_ms), city_day(where.end_ms - 1) + 1):
                part = self._days.get(day)
                if part is None:
                    continue
                limits, scores, positions = part.index.range_search(query, threshold)
                for score, position in zip(scores[limits[0]:limits[1]], positions[limits[0]:limits[1]], strict=True):
                    at = int(position)
                    if where.holds(part.capture_ms[at], part.checkpoints[at]):
                        found.append(Hit(part.record_ids[at], min(1.0, round(float(score), 6)), part.capture_ms[at],
                                         part.checkpoints[at]))
        found.sort(key=lambda hit: (-hit.score, hit.capture_ms, hit.record_id))
        return found[:limit], len(found)

    def drop_before(self, horizon_ms: int) -> int:
        """Forget every day that ended at or before ``horizon_ms`` (retention); how many faces went with them."""
        with self._lock:
            old = [day for day in self._days if day_end_ms(day) <= horizon_ms]
            dropped = 0
            for day in old:
                part = self._days.pop(day)
                for record_id in part.record_ids:
                    del self._where[record_id]
                dropped += len(part.record_ids)
            return dropped
