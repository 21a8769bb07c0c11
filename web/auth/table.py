"""One console table reached through the shared HBase pool, created on first use."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager

import happybase

from contracts.retention import with_ttl
from contracts.tables import console as tables
from contracts.tables import ensure_tables

Connect = Callable[[], AbstractContextManager[happybase.Connection]]
"""``Backends.hbase``: a pooled connection whose transport failures become 503 naming hbase."""


class ConsoleTable:
    def __init__(self, connect: Connect, name: str, ttl_s: int | None = None) -> None:
        """``ttl_s``: the time to live its cells get if this creates the table (its layout's own otherwise)."""
        self._connect = connect
        self.name = name
        layout = {name: tables.TABLES[name]}
        self._layout = layout if ttl_s is None else with_ttl(layout, ttl_s)
        self._ready = False

    @contextlib.contextmanager
    def open(self) -> Iterator[happybase.Table]:
        with self._connect() as connection:
            if not self._ready:
                ensure_tables(connection, self._layout)
                self._ready = True
            yield connection.table(self.name)
