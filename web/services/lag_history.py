"""Consumer-group lag over time: sampled server-side every ``lag_sample_interval_s`` and kept in HBase.

Kafka keeps no lag history, and a chart drawn only while a page is open starts empty and forgets on
reload, which is why Kafka UI users keep asking for it. One background thread per console samples
every group (the same lag figures as the groups page) and writes one row per group and sample
(layout: ``contracts.tables.console``, one day of TTL); a restarted console reads the same rows.

The sampler asks the bus through the bus package's own admin client (``bus.client.admin``), not librdkafka's:
it runs unattended through every outage, and librdkafka's admin client can abort the whole process when a broker
comes back while group requests that timed out are still pending on it (an assertion in its coordinator requests,
``rd_kafka_enq_once_del_source_return``, confluentinc/librdkafka#4605; a console died that way when a broker host
returned to the network). A failed call here is an exception like any other: the sample is skipped, logged.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from bus.client.admin import AdminClient
from bus.client.errors import KafkaConnectionError, KafkaError
from contracts.tables import console as tables
from web.auth.table import ConsoleTable

from ..backends import BUS, Backends, BackendUnavailable
from .background import Sampler

log = logging.getLogger(__name__)

WINDOW_MS = 3600 * 1000


class LagHistory:
    def __init__(self, backends: Backends, interval_s: float, bus: Mapping[str, str], timeout_s: float) -> None:
        """``bus``: the console's bus client settings in Kafka's keys (``ConsoleSettings.bus_java``); ``timeout_s``
        bounds each request (a whole sample's retries get twice that)."""
        self.backends = backends
        self.interval_ms = max(int(interval_s * 1000), 1)
        self._bus = {**bus, "client.id": "console-lag-sampler", "request.timeout.ms": str(int(timeout_s * 1000)),
                     "default.api.timeout.ms": str(int(2 * timeout_s * 1000)),
                     "socket.connection.setup.timeout.ms": str(int(timeout_s * 1000))}
        self._admin: AdminClient | None = None
        self._lock = threading.Lock()
        self._table = ConsoleTable(backends.hbase, tables.LAG_TABLE)
        self._sampler = Sampler("lag-sampler", self.interval_ms / 1000, self.sample, log=log, what="lag sample",
                                expected=(BackendUnavailable,))

    def sample(self, now_ms: int | None = None) -> int:
        """Record every group's lag now (time rounded down to the interval); returns how many groups."""
        now_ms = time.time_ns() // 1_000_000 if now_ms is None else now_ms
        at = now_ms - now_ms % self.interval_ms
        lags = self.lag_by_group()
        with self._table.open() as table, table.batch() as batch:
            for group_id, rows in lags.items():
                batch.put(tables.lag_row_key(group_id, at), tables.lag_row(at, rows))
        return len(lags)

    def lag_by_group(self) -> dict[str, list[tuple[str, int, int | None]]]:
        """Every consumer group's (topic, partition, lag) per committed partition, as the groups page shows them
        (no lag figure for a partition whose topic is gone); BackendUnavailable when the bus does not answer."""
        try:
            with self._lock:
                if self._admin is None:
                    self._admin = AdminClient(self._bus)
                admin = self._admin
            return {listing.group_id: [(tp.topic, tp.partition, lag.lag) for tp, lag in
                                       sorted(admin.list_consumer_group_lag(listing.group_id).items())]
                    for listing in admin.list_consumer_groups()}
        except (KafkaError, KafkaConnectionError, OSError) as exc:
            raise BackendUnavailable(BUS, str(exc) or type(exc).__name__) from None

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
        with self._lock:
            if self._admin is not None:
                self._admin.close()
                self._admin = None
