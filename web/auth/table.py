"""One console table reached through the shared HBase pool, created (with its siblings) on first use."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager

import happybase

from contracts.tables import console as tables

Connect = Callable[[], AbstractContextManager[happybase.Connection]]
"""``Backends.hbase``: a pooled connection whose transport failures become 503 naming hbase."""


class ConsoleTable:
    def __init__(self, connect: Connect, name: str) -> None:
        self._connect = connect
        self.name = name
        self._ready = False

    @contextlib.contextmanager
    def open(self) -> Iterator[happybase.Table]:
        with self._connect() as connection:
            if not self._ready:
                tables.ensure_console_tables(connection)
                self._ready = True
            yield connection.table(self.name)
