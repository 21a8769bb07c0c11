"""Face captures for the face search's tests and benchmarks/search_faces.py: `plant` makes valid face records with a
few people hidden among them (each seen many times with more or less recogniser noise), `load_faces` writes them as
the ingest job does, `Planted.exact` is the exact numpy cosine search every answer is compared with.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import numpy as np

from contracts.records import FEATURE_DIM, Kind, encode_feature, epoch_ms, format_time
from ingest.city import City
from spark_jobs.capture_writer import close_cached_clients, write_puts
from testkit.web_data import create_tables, puts_for, valid_records, writer

PEOPLE = 4
SIGHTINGS = 40


def unit_rows(rng: np.random.Generator, n: int) -> np.ndarray:
    rows = rng.standard_normal((n, FEATURE_DIM)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)



@dataclass
class Planted:
    """The faces written, their vectors (float32 as decoded) and the planted people's sightings."""

    records: list[dict[str, Any]]
    vectors: np.ndarray
    people: list[list[int]]
    """Per person, the indexes into ``records`` of their sightings, best (least noisy) first."""

    def exact(self, query: np.ndarray, start_ms: int, end_ms: int, min_score: float,
              place: str | None = None) -> set[str]:
        """The ground truth: numpy cosine over every face in the range (and place)."""
        scores = self.vectors @ query.ravel()
        return {r["record_id"] for r, s in zip(self.records, scores, strict=True)
                if s >= min_score and start_ms <= epoch_ms(r["capture_time"]) < end_ms
                and (place is None or r["checkpoint_id"].startswith(place))}



def face_templates(city: City, seed: int) -> list[dict[str, Any]]:
    """Real face records of the simulator (their devices, recognisers, images), to vary."""
    return [r for k, r in valid_records(120, seed=seed, city=city, face_share=1.0) if k is Kind.FACE]



def plant(count: int, first: datetime, span: timedelta, city: City, seed: int = 11, people: int = PEOPLE,
          sightings: int = SIGHTINGS, prefix: str = "fs") -> Planted:
    """``count`` valid face records evenly over ``[first, first + span)``; ``people`` of them seen ``sightings``
    times each with noise from 0.15 (cosine ~0.99) to 1.0 (~0.7) around their identity."""
    rng = np.random.default_rng(seed)
    templates = face_templates(city, seed)
    vectors = unit_rows(rng, count)
    planted: list[list[int]] = []
    slots = rng.permutation(count)
    for p in range(people):
        identity = unit_rows(rng, 1)[0]
        mine = sorted(slots[p * sightings:(p + 1) * sightings].tolist())
        noise = np.linspace(0.15, 1.0, sightings)
        rng.shuffle(noise)
        for at, magnitude in zip(mine, noise, strict=True):
            jitter = rng.standard_normal(FEATURE_DIM).astype(np.float32) * magnitude / np.sqrt(FEATURE_DIM)
            vectors[at] = (identity + jitter) / np.linalg.norm(identity + jitter)
        order = np.argsort(noise)
        planted.append([mine[k] for k in order])
    step = span / count
    records = []
    for i in range(count):
        template = templates[i % len(templates)]
        records.append({**template, "record_id": f"{prefix}-{i}", "capture_time": format_time(first + i * step),
                        "feature": encode_feature(vectors[i].tolist())})
    decoded = np.frombuffer(b"".join(base64.b64decode(r["feature"]) for r in records), dtype="<f4")
    return Planted(records, decoded.reshape(count, FEATURE_DIM).copy(), planted)



def load_faces(port: int, records: list[dict[str, Any]], every_table: bool = False) -> None:
    """The ingest writer's rows of the main ``face`` table, the only one the face index reads (its index rows by
    checkpoint would double the load's time and be read by nobody here); ``every_table`` writes those too, for a
    test that also finds the faces with the capture search."""
    create_tables(port)
    settings = writer(port)
    try:
        for start in range(0, len(records), 4000):
            write_puts([put for put in puts_for([(Kind.FACE, r) for r in records[start:start + 4000]])
                        if every_table or put[0] == Kind.FACE.value], settings)
    finally:
        close_cached_clients()
