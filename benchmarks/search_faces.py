"""Similar-face search over a month of faces, and the face index's loader from HBase (a script, not a test).

Two measurements (issue 29 part 2):

* **search**: ``--faces`` (500,000) faces over 31 city days in the console's :class:`FaceIndex`, among them
  ``--people`` planted people seen ``--sightings`` times each with recogniser noise from slight (cosine ~0.99) to
  heavy (~0.7). Each query is one sighting of a planted person over the whole month at the default threshold (0.8),
  the widest search the API allows; p50/p99 latency (target p99 <= 500 ms) and recall/precision against an exact
  numpy cosine search over every face;
* **loader**: ``--hbase-faces`` (100,000) face rows written as the ingest job writes them into the embedded HBase
  gateway, then the console's own build (:class:`FaceSearch`, with a broker for its follow positions): faces
  indexed per second from HBase. 500,000 rows take the gateway minutes to take in; the rate is per row.

    .venv/bin/python benchmarks/search_faces.py [--faces 500000] [--queries 200] [--hbase-faces 100000]
    .venv/bin/python benchmarks/search.py --only faces     # the same, with the defaults
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from contracts.hbase import HBaseClient  # noqa: E402
from contracts.records import CITY_TZ, FEATURE_DIM  # noqa: E402
from deploy.processes.broker import BrokerProcess  # noqa: E402
from deploy.processes.gateway import start_gateway  # noqa: E402
from ingest.city import build_city  # noqa: E402
from testkit.faces import load_faces, plant  # noqa: E402
from web.backends import Backends  # noqa: E402
from web.services.face_follow import FaceSearch, FollowSettings  # noqa: E402
from web.services.face_index import DAY_MS, Face, FaceIndex, Where  # noqa: E402
from web.settings import ConsoleSettings  # noqa: E402

MIN_SCORE = 0.8
DAYS = 31


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def search(out: Console, faces: int, people: int, sightings: int, queries: int) -> dict[str, float]:
    """Index ``faces`` over a month, then time ``queries`` searches and check them against numpy."""
    rng = np.random.default_rng(5)
    vectors = rng.standard_normal((faces, FEATURE_DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    slots = rng.permutation(faces)[:people * sightings].reshape(people, sightings)
    for row in slots:
        identity = rng.standard_normal(FEATURE_DIM).astype(np.float32)
        identity /= np.linalg.norm(identity)
        noise = rng.uniform(0.15, 1.0, (sightings, 1)).astype(np.float32) / np.sqrt(FEATURE_DIM)
        jittered = identity + rng.standard_normal((sightings, FEATURE_DIM)).astype(np.float32) * noise
        vectors[row] = jittered / np.linalg.norm(jittered, axis=1, keepdims=True)
    end_ms = int(time.time() * 1000)
    start_ms = end_ms - DAYS * DAY_MS
    times = np.sort(rng.integers(start_ms, end_ms, faces))
    checkpoints = [f"33010{i % 6}#{i % 40}#0#0" for i in range(faces)]
    index = FaceIndex()
    began = time.perf_counter()
    for first in range(0, faces, 10_000):
        index.add(Face(f"r{i}", int(times[i]), checkpoints[i], vectors[i:i + 1])
                  for i in range(first, min(faces, first + 10_000)))
    add_s = time.perf_counter() - began
    where = Where(start_ms, end_ms + 1)
    latencies, recalls, precisions = [], [], []
    asked = rng.choice(slots.ravel(), queries)
    for at in asked:
        query = vectors[at:at + 1]
        began = time.perf_counter()
        hits, _matched = index.search(query, where, MIN_SCORE, 1000)
        latencies.append((time.perf_counter() - began) * 1000)
        exact = set(np.flatnonzero(vectors @ query.ravel() >= MIN_SCORE).tolist())
        got = {int(hit.record_id[1:]) for hit in hits}
        recalls.append(len(exact & got) / len(exact))
        precisions.append(len(exact & got) / max(1, len(got)))
    figures = {"faces": faces, "days": index.days, "index_add_faces_per_s": faces / add_s,
               "p50_ms": percentile(latencies, 50), "p99_ms": percentile(latencies, 99),
               "recall_min": min(recalls), "recall_mean": float(np.mean(recalls)),
               "precision_min": min(precisions)}
    table = Table(title=f"similar-face search: {faces:,} faces over {index.days} days, min_score {MIN_SCORE}")
    for key in ("faces", "days", "index_add_faces_per_s", "p50_ms", "p99_ms", "recall_min", "recall_mean",
                "precision_min"):
        value = figures[key]
        table.add_row(key, f"{value:,.3f}" if isinstance(value, float) else f"{value:,}")
    out.print(table)
    return figures


def loader(out: Console, count: int) -> dict[str, float]:
    """``count`` faces into a fresh gateway, then the console's build from it: faces indexed per second."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        gateway = start_gateway(root / "hbase", log_dir=root)
        broker = BrokerProcess(root / "broker").start()
        try:
            now = datetime.now(CITY_TZ)
            data = plant(count, now - timedelta(days=DAYS - 1), timedelta(days=DAYS - 2), build_city(7, 12),
                         people=10, sightings=40, prefix="bench")
            began = time.perf_counter()
            load_faces(gateway.port, data.records)
            write_s = time.perf_counter() - began
            settings = ConsoleSettings(hbase=HBaseClient(port=gateway.port),
                                       bus={"bootstrap.servers": broker.bootstrap})
            backends = Backends(settings)
            faces = FaceSearch(FollowSettings.from_console(settings), backends)
            faces.start()
            while not faces.ready:
                time.sleep(0.05)
            faces.stop()
            backends.close()
            built = faces.progress()
        finally:
            broker.stop()
            gateway.kill()
    figures = {"hbase_faces": count, "write_rows_per_s": count / write_s, "build_s": built["build_seconds"],
               "faces_indexed": built["faces"], "loader_faces_per_s": built["faces"] / built["build_seconds"]}
    table = Table(title="face index loader (HBase scan -> index)")
    for key, value in figures.items():
        table.add_row(key, f"{value:,.1f}" if isinstance(value, float) else f"{value:,}")
    out.print(table)
    return figures


def main(argv: list[str] | None = None) -> None:
    """Both measurements; ``argv`` as on the command line (None: ``sys.argv``)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--faces", type=int, default=500_000)
    parser.add_argument("--people", type=int, default=50)
    parser.add_argument("--sightings", type=int, default=40)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--hbase-faces", type=int, default=100_000, help="0: skip the loader measurement")
    args = parser.parse_args(argv)
    out = Console()
    search(out, args.faces, args.people, args.sightings, args.queries)
    if args.hbase_faces:
        loader(out, args.hbase_faces)
    load = os.getloadavg()
    out.print(f"load average {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} on {os.cpu_count()} cores "
              "(other work on the machine inflates the latencies)")


if __name__ == "__main__":
    main()
