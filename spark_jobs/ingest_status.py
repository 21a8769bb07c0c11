"""The ingest job's running tally: per batch a JSON line, and a status file `make up` reads.

Counts are of this process's batches (a replayed batch after a crash counts again here, though
its rows only overwrite themselves in HBase). Rates and latency percentiles cover a sliding window
of recent batches, which is what an operator watching the status line wants.
"""

from __future__ import annotations

import json
import math
import time
from collections import Counter, deque
from pathlib import Path
from typing import Any

WINDOW_S = 30.0


def percentile(values: list[int], q: float) -> int | None:
    """Nearest-rank percentile (q in 0..100) of a list; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(q / 100.0 * len(ordered))))
    return ordered[rank - 1]


class IngestStatus:
    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.started = time.time()
        self.batches = 0
        self.valid: Counter[str] = Counter()
        self.unrecognized: Counter[str] = Counter()
        self.invalid: Counter[str] = Counter()
        self.window: deque[tuple[float, int, int, list[int]]] = deque()

    def record(self, batch_id: int, summary: dict[str, Any], seconds: float) -> dict[str, Any] | None:
        """Add one batch; returns its JSON line (None for an empty batch)."""
        now = time.time()
        records = sum(summary["valid"].values()) + sum(summary["unrecognized"].values()) + sum(
            summary["invalid"].values())
        self.batches += 1
        self.valid.update(summary["valid"])
        self.unrecognized.update(summary["unrecognized"])
        self.invalid.update(summary["invalid"])
        self.window.append((now, records, sum(summary["valid"].values()), summary["latencies_ms"]))
        while self.window and self.window[0][0] < now - WINDOW_S:
            self.window.popleft()
        self._write()
        if records == 0:
            return None
        latencies = summary["latencies_ms"]
        return {
            "batch": batch_id,
            "records": records,
            "valid": summary["valid"],
            "unrecognized": summary["unrecognized"],
            "invalid": summary["invalid"],
            "seconds": round(seconds, 3),
            "latency_ms": {"p50": percentile(latencies, 50), "p99": percentile(latencies, 99),
                           "max": max(latencies) if latencies else None},
        }

    def totals(self) -> dict[str, Any]:
        return {"batches": self.batches, "valid": dict(self.valid), "unrecognized": dict(self.unrecognized),
                "invalid": dict(self.invalid)}

    def snapshot(self) -> dict[str, Any]:
        span = max(min(WINDOW_S, time.time() - self.started), 1e-3)
        latencies = [x for *_, batch in self.window for x in batch]
        return {
            **self.totals(),
            "updated": time.time(),
            "records_per_s": round(sum(w[1] for w in self.window) / span, 1),
            "rows_per_s": round(sum(w[2] for w in self.window) / span, 1),
            "latency_ms": {"p50": percentile(latencies, 50), "p99": percentile(latencies, 99)},
        }

    def _write(self) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.snapshot()))
        tmp.replace(self.path)
