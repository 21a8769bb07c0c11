"""Consumer-group lag over time: sampled server-side every ``lag_sample_interval_s`` and kept in HBase.

Kafka keeps no lag history, and a chart drawn only while a page is open starts empty and forgets on
reload, which is why Kafka UI users keep asking for it. One background thread per console samples
every group (the same lag figures as the groups page) and writes one row per group and sample
(layout: ``contracts.tables.console``, one day of TTL); a restarted console reads the same rows.

It runs unattended through every outage: its group calls go through ``Backends.group_admin`` (not librdkafka's
admin client, which can abort the process then), and a sample that fails is skipped and logged.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from contracts.tables import console as tables
from web.auth.table import ConsoleTable

from ..backends import Backends, BackendUnavailable
from . import groups
from .background import Sampler

log = logging.getLogger(__name__)

WINDOW_MS = 3600 * 1000


class LagHistory:
    def __init__(self, backends: Backends, interval_s: float) -> None:
        self.backends = backends
        self.interval_ms = max(int(interval_s * 1000), 1)
        self._table = ConsoleTable(backends.hbase, tables.LAG_TABLE)
        self._sampler = Sampler("lag-sampler", self.interval_ms / 1000, self.sample, log=log, what="lag sample",
                                expected=(BackendUnavailable,))

    def sample(self, now_ms: int | None = None) -> int:
        """Record every group's lag now (time rounded down to the interval); returns how many groups."""
        now_ms = time.time_ns() // 1_000_000 if now_ms is None else now_ms
        at = now_ms - now_ms % self.interval_ms
        lags = groups.lag_by_group(self.backends)
        with self._table.open() as table, table.batch() as batch:
            for group_id, rows in lags.items():
                batch.put(tables.lag_row_key(group_id, at), tables.lag_row(at, rows))
        return len(lags)

    def history(self, group_id: str, window_ms: int = WINDOW_MS, now_ms: int | None = None) -> list[dict[str, Any]]:
        """The group's samples of the last ``window_ms``, oldest first (a chart's order).

        Every console samples at its own interval into the same rows, so the window's key range bounds the
        read, not this console's interval (a console sampling hourly cut a neighbour's per-second history
        to its newest three points)."""
        now_ms = time.time_ns() // 1_000_000 if now_ms is None else now_ms
        since = max(now_ms - window_ms, 1)
        with self._table.open() as table:
            rows = list(table.scan(row_start=tables.lag_row_key(group_id, now_ms),
                                   row_stop=tables.lag_row_key(group_id, since - 1)))
        points = []
        for _key, cells in reversed(rows):
            sample = tables.read_lag(cells)
            points.append({"time_ms": sample["time_ms"], "total": sample["total"],
                           "partitions": [{"topic": t, "partition": p, "lag": lag}
                                          for t, p, lag in sample["partitions"]]})
        return points

    # -- the sampler thread -----------------------------------------------------------------------
    def start(self) -> None:
        self._sampler.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._sampler.stop(timeout)
