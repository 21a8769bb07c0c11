"""The watchlists in process: fuzzy plate classes, face slots, and big lists within bounded memory and time."""

from __future__ import annotations

import random
import time
import tracemalloc

import numpy as np

from contracts.records import encode_feature
from contracts.surveillance import WatchCommand, watch_from_json
from ingest import values
from surveillance.faces import FaceWatchlist
from surveillance.plates import PlateWatchlist, class_key

CP = "330102#1#0#0"


def plate(watch_id: str, number: str, **extra: object) -> WatchCommand:
    return watch_from_json({"watch_id": watch_id, "kind": "plate", "plate": number, **extra})


def face(watch_id: str, vector: list[float], threshold: float = 0.8) -> WatchCommand:
    return watch_from_json({"watch_id": watch_id, "kind": "face", "feature": encode_feature(vector),
                            "threshold": threshold})


def test_confusable_characters_share_a_class() -> None:
    assert class_key("浙A0D8B1") == class_key("浙AQO881") == "浙A00881"
    assert class_key("浙AZ5S6G") == class_key("浙A25566") and class_key("浙A12345") != class_key("浙A12346")


def test_exact_fuzzy_and_not_a_match() -> None:
    watchlist = PlateWatchlist()
    watchlist.add(plate("w", "浙A12345"))
    found = watchlist.match("浙A12345", CP, "330102", 0)
    assert [(m.watch.watch_id, m.match, m.score) for m in found] == [("w", "exact", 1.0)]
    assert [m.match for m in watchlist.match("浙A1234S", CP, None, 0)] == ["fuzzy"]
    assert watchlist.match("浙AIZ345", CP, None, 0) == []  # two misreads: a different car
    assert watchlist.match("浙B12345", CP, None, 0) == []
    assert PlateWatchlist(fuzzy=False).match("浙A1234S", CP, None, 0) == []
    off = PlateWatchlist(fuzzy=False)
    off.add(plate("w", "浙A12345"))
    assert off.match("浙A1234S", CP, None, 0) == [] and len(off.match("浙A12345", CP, None, 0)) == 1


def test_replace_remove_expiry_and_scope() -> None:
    watchlist = PlateWatchlist()
    watchlist.add(plate("w", "浙A12345"))
    watchlist.add(plate("w", "浙A99999"))  # same id: replaced, the old plate no longer hits
    assert watchlist.match("浙A12345", CP, None, 0) == [] and len(watchlist) == 1
    watchlist.add(plate("x", "浙A99999", expires_at="2026-01-01T00:00:00+08:00", districts=["330106"]))
    assert {m.watch.watch_id for m in watchlist.match("浙A99999", "330106#0#0#0", "330106", 0)} == {"w", "x"}
    assert {m.watch.watch_id for m in watchlist.match("浙A99999", CP, "330102", 0)} == {"w"}  # out of scope
    assert {m.watch.watch_id for m in watchlist.match("浙A99999", "330106#0#0#0", "330106", 2**60)} == {"w"}
    assert len(watchlist) == 1  # the expired watch was dropped
    assert watchlist.remove("w") and not watchlist.remove("w") and len(watchlist) == 0


def test_face_slots_are_reused_and_removed_faces_never_match() -> None:
    rng = random.Random(5)
    people = [values.unit_vector(rng) for _ in range(3)]
    watchlist = FaceWatchlist(capacity=2)
    for n, person in enumerate(people):
        watchlist.add(face(f"f{n}", person))
    batch = np.array(people, dtype=np.float32)
    assert [[m.watch.watch_id for m in row] for row in watchlist.match(batch)] == [["f0"], ["f1"], ["f2"]]
    assert watchlist.remove("f1") and not watchlist.remove("f1")
    assert [[m.watch.watch_id for m in row] for row in watchlist.match(batch)] == [["f0"], [], ["f2"]]
    watchlist.add(face("f3", people[1], threshold=1.0))  # reuses f1's slot; exact similarity needs 1.0
    watchlist.add(face("f0", people[0], threshold=0.5))  # replaced in place
    rows = watchlist.match(batch)
    assert [m.watch.threshold for m in rows[0]] == [0.5] and len(watchlist) == 3
    assert all(m.watch.watch_id == "f3" for m in rows[1])


def test_100000_plates_and_20000_faces_load_and_match_within_bounds() -> None:
    """Memory: a plate watch is a few hundred bytes, a face 512 bytes of matrix plus its command."""
    rng = random.Random(9)
    tracemalloc.start()
    plates = PlateWatchlist()
    numbers = [values.plate(rng, "blue") for _ in range(100_000)]
    for n, number in enumerate(numbers):
        plates.add(plate(f"p{n}", number))
    faces = FaceWatchlist()
    identities = np.random.default_rng(1).standard_normal((20_000, 128)).astype(np.float32)
    identities /= np.linalg.norm(identities, axis=1, keepdims=True)
    for n in range(20_000):
        faces.add(WatchCommand(f"f{n}", "face", feature=identities[n].tobytes(), threshold=0.8))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"100,000 plates + 20,000 faces: peak {peak / 2**20:.0f} MiB traced")
    assert peak < 300 * 2**20
    started = time.perf_counter()
    hits = sum(len(plates.match(number, CP, None, 0)) for number in numbers[:10_000])
    plate_us = (time.perf_counter() - started) / 10_000 * 1e6
    assert hits >= 10_000
    batch = identities[:500] + np.float32(0.01)
    started = time.perf_counter()
    rows = faces.match(batch / np.linalg.norm(batch, axis=1, keepdims=True))
    face_ms = (time.perf_counter() - started) * 1000
    print(f"plate lookup {plate_us:.1f} us; 500 faces x 20,000 watched: {face_ms:.0f} ms")
    assert [row[0].watch.watch_id for row in rows] == [f"f{n}" for n in range(500)]
    assert plate_us < 200 and face_ms < 2000  # generous: the machine is shared
