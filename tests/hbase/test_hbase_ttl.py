"""Column-family time to live (issue 27, item 6), as happybase sees it on a real gateway process.

A family created with ``time_to_live`` (seconds) hides a cell once its timestamp is older than
that, at once and on every read path; the other families are untouched; compaction removes the
expired cells from storage even when the table is never written again; the TTL is part of the
table's schema and survives a restart.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import happybase

from deploy.hbase_gateway.cells import now_ms
from deploy.hbase_gateway.store import DB_FILE
from deploy.processes.gateway import Gateway

TTL = 2
FOREVER = 2**31 - 1


def _create(conn: happybase.Connection, name: str = "ttl") -> happybase.Table:
    conn.create_table(name, {"short": {"time_to_live": TTL}, "keep": {}})
    return conn.table(name)


def _all_reads(table: happybase.Table, row: bytes) -> dict[str, object]:
    """The same row through every read path happybase has."""
    client = table.connection.client
    return {
        "row": table.row(row),
        "rows": dict(table.rows([row])).get(row, {}),
        "short cells": table.cells(row, b"short:a", versions=3),
        "keep cells": table.cells(row, b"keep:a", versions=3),
        "scan": dict(table.scan()).get(row, {}),
        "scan short": dict(table.scan(columns=[b"short"])).get(row, {}),
        "filtered scan": dict(table.scan(filter="QualifierFilter(=, 'binary:a')")).get(row, {}),
        "getRowTs": {c: v.value for r in client.getRowTs(table.name, row, 2**62, {}) for c, v in r.columns.items()},
    }


def _expect(row_cells: dict[bytes, bytes]) -> dict[str, object]:
    short = [v for c, v in row_cells.items() if c.startswith(b"short:")]
    keep = [v for c, v in row_cells.items() if c.startswith(b"keep:")]
    return {
        "row": row_cells,
        "rows": row_cells,
        "short cells": short,
        "keep cells": keep,
        "scan": row_cells,
        "scan short": {c: v for c, v in row_cells.items() if c.startswith(b"short:")},
        "filtered scan": row_cells,
        "getRowTs": row_cells,
    }


def _wait_until(deadline_ms: int) -> None:
    time.sleep(max(0.0, (deadline_ms - now_ms()) / 1000))


def test_ttl_family_expires_and_the_other_stays_across_a_restart(spawn: Callable[..., Gateway]) -> None:
    gw = spawn()
    conn = gw.connect()
    table = _create(conn)
    families = table.families()
    assert families[b"short"]["time_to_live"] == TTL
    assert families[b"keep"]["time_to_live"] == FOREVER

    written = now_ms()
    table.put(b"r1", {b"short:a": b"s1", b"keep:a": b"k1"})
    table.put(b"r2", {b"short:a": b"s2"})
    assert now_ms() - written < 1000, "the machine is too slow for a 2 s TTL test"
    assert _all_reads(table, b"r1") == _expect({b"keep:a": b"k1", b"short:a": b"s1"})
    assert table.row(b"r2") == {b"short:a": b"s2"}

    _wait_until(written + TTL * 1000 + 300)
    assert _all_reads(table, b"r1") == _expect({b"keep:a": b"k1"})
    assert table.row(b"r2") == {}
    assert [k for k, _ in table.scan()] == [b"r1"]  # r2 had only short cells: gone from scans

    # The TTL is in the table's schema: a restarted gateway reports it and still applies it.
    table.put(b"r3", {b"short:a": b"s3", b"keep:a": b"k3"})
    assert gw.terminate() == 0
    gw2 = spawn(data_dir=gw.data_dir)
    table2 = gw2.connect().table("ttl")
    families = table2.families()
    assert (families[b"short"]["time_to_live"], families[b"keep"]["time_to_live"]) == (TTL, FOREVER)
    assert _all_reads(table2, b"r1") == _expect({b"keep:a": b"k1"})
    fresh = now_ms()
    table2.put(b"r4", {b"short:a": b"s4"})
    assert table2.row(b"r4") == {b"short:a": b"s4"}
    _wait_until(fresh + TTL * 1000 + 300)
    assert table2.row(b"r4") == {}
    assert table2.row(b"r3") == {b"keep:a": b"k3"}
    assert [k for k, _ in table2.scan()] == [b"r1", b"r3"]


def test_write_with_old_timestamp_is_invisible_at_once(spawn: Callable[..., Gateway]) -> None:
    table = _create(spawn().connect())
    old = now_ms() - (TTL + 1) * 1000
    table.put(b"r", {b"short:a": b"old", b"keep:a": b"old"}, timestamp=old)
    assert _all_reads(table, b"r") == _expect({b"keep:a": b"old"})
    table.put(b"only-short", {b"short:a": b"old"}, timestamp=old)
    assert table.row(b"only-short") == {}
    assert [k for k, _ in table.scan()] == [b"r"]
    # Newer versions hide nothing older in the TTL's favour: only the live one is seen.
    table.put(b"r", {b"short:a": b"new"})
    assert table.cells(b"r", b"short:a", versions=5) == [b"new"]
    # A counter whose only cell expired starts again from zero.
    table.put(b"c", {b"short:n": (41).to_bytes(8, "big")}, timestamp=old)
    assert table.counter_inc(b"c", b"short:n") == 1


def _stored_cells(data_dir: Path, table: str) -> list[tuple[bytes, bytes]]:
    """What the gateway's SQLite file holds for a table, read directly (read-only)."""
    db = sqlite3.connect(f"file:{data_dir / DB_FILE}?mode=ro", uri=True)
    try:
        (tid,) = db.execute("SELECT id FROM hb_tables WHERE name = ?", (table.encode(),)).fetchone()
        return [(bytes(r), bytes(c)) for r, c in db.execute(f"SELECT row, col FROM cells_{tid} ORDER BY row, col")]
    finally:
        db.close()


def test_expired_cells_leave_storage_at_compaction(spawn: Callable[..., Gateway]) -> None:
    """The background compaction purges cells that expire long after the table's last write."""
    gw = spawn("--compaction-interval-seconds", "0.5")
    table = _create(gw.connect())
    written = now_ms()
    table.put(b"r1", {b"short:a": b"s", b"short:b": b"s", b"keep:a": b"k"})
    table.put(b"r2", {b"short:a": b"s"})
    time.sleep(1.2)  # compactions run while the cells are still alive: nothing to drop yet
    assert len(_stored_cells(gw.data_dir, "ttl")) == 4
    _wait_until(written + TTL * 1000 + 200)
    deadline = time.monotonic() + 5
    while len(_stored_cells(gw.data_dir, "ttl")) > 1 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _stored_cells(gw.data_dir, "ttl") == [(b"r1", b"keep:a")]
    assert table.row(b"r1") == {b"keep:a": b"k"}


def test_compact_call_purges_expired_cells(spawn: Callable[..., Gateway]) -> None:
    gw = spawn("--compaction-interval-seconds", "0")  # no background compaction
    conn = gw.connect()
    table = _create(conn)
    old = now_ms() - (TTL + 1) * 1000
    table.put(b"r", {b"short:a": b"old", b"keep:a": b"old"}, timestamp=old)
    assert len(_stored_cells(gw.data_dir, "ttl")) == 2  # hidden, not yet removed
    conn.compact_table("ttl", major=True)
    assert _stored_cells(gw.data_dir, "ttl") == [(b"r", b"keep:a")]
