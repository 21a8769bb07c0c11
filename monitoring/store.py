"""The monitor's HBase I/O: series buckets and state rows, one happybase connection per thread.

happybase connections are not thread-safe and the monitor writes from three kinds of thread (the
consumer loop, the evaluation job, the notifiers), so each thread opens its own, lazily.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

import happybase

from contracts.hbase import HBaseClient
from contracts.tables.monitoring import (
    SERIES_TABLE,
    STATE_TABLE,
    ensure_monitoring_tables,
    read_state,
    state_cells,
    state_key,
)


class Store:
    def __init__(self, hbase: HBaseClient) -> None:
        self.hbase = hbase
        self._local = threading.local()
        self._all: list[happybase.Connection] = []
        self._lock = threading.Lock()

    def connection(self) -> happybase.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self.hbase.connect()
            with self._lock:
                self._all.append(conn)
        return conn

    def ensure_tables(self) -> None:
        ensure_monitoring_tables(self.connection())

    def close(self) -> None:
        with self._lock:
            for conn in self._all:
                conn.close()
            self._all.clear()

    # state rows
    def states(self, kind: str) -> list[tuple[str, dict[str, Any]]]:
        rows = self.connection().table(STATE_TABLE).scan(row_prefix=f"{kind}|".encode())
        return [(key.decode().split("|", 1)[1], read_state(cells)) for key, cells in rows]

    def put_states(self, kind: str, values: Iterable[tuple[str, dict[str, Any]]]) -> None:
        with self.connection().table(STATE_TABLE).batch() as batch:
            for ident, value in values:
                batch.put(state_key(kind, ident), state_cells(value))

    def delete_states(self, kind: str, idents: Iterable[str]) -> None:
        with self.connection().table(STATE_TABLE).batch() as batch:
            for ident in idents:
                batch.delete(state_key(kind, ident))

    # series rows
    def series_rows(self, keys: list[bytes]) -> dict[bytes, dict[bytes, bytes]]:
        if not keys:
            return {}
        return dict(self.connection().table(SERIES_TABLE).rows(keys))

    def put_series(self, rows: dict[bytes, dict[bytes, bytes]]) -> None:
        with self.connection().table(SERIES_TABLE).batch() as batch:
            for key, cells in rows.items():
                batch.put(key, cells)
