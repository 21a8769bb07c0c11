"""Puts, gets, versions, TTL, deletes and counters, as happybase sees them."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable

import happybase
import pytest
from Hbase_thrift import BatchMutation, IllegalArgument, IOError, Mutation

from deploy.processes.gateway import Gateway

from .conftest import unique_name


def now_ms() -> int:
    return int(time.time() * 1000)


def test_put_and_read_back(table: happybase.Table) -> None:
    table.put(b"r1", {b"cf:a": b"1", b"cf:b": b"2", b"cg:c": b"3"})
    table.put(b"r2", {b"cf:a": b"x"})
    assert table.row(b"r1") == {b"cf:a": b"1", b"cf:b": b"2", b"cg:c": b"3"}
    assert table.row(b"r1", columns=[b"cf"]) == {b"cf:a": b"1", b"cf:b": b"2"}
    assert table.row(b"r1", columns=[b"cf:b", b"cg:c"]) == {b"cf:b": b"2", b"cg:c": b"3"}
    assert table.row(b"missing") == {}
    assert table.rows([b"r2", b"missing", b"r1"], columns=[b"cf:a"]) == [
        (b"r2", {b"cf:a": b"x"}),
        (b"r1", {b"cf:a": b"1"}),
    ]
    assert dict(table.rows([b"r1", b"r2"]))[b"r2"] == {b"cf:a": b"x"}


def test_binary_keys_and_values(table: happybase.Table) -> None:
    key, value = b"\x00\xff\x01row", bytes(range(256))
    table.put(key, {b"cf:\x00q": value, b"cf:": b"empty qualifier"})
    assert table.row(key) == {b"cf:\x00q": value, b"cf:": b"empty qualifier"}


def test_timestamps_and_versions(table: happybase.Table) -> None:
    for ts, value in ((10, b"v10"), (20, b"v20"), (30, b"v30"), (40, b"v40")):
        table.put(b"r", {b"cf:a": value, b"cg:a": value}, timestamp=ts)
    assert table.row(b"r", include_timestamp=True) == {b"cf:a": (b"v40", 40), b"cg:a": (b"v40", 40)}
    # cf keeps 3 versions, cg keeps 1: newest first, capped by the family.
    assert table.cells(b"r", b"cf:a", versions=10, include_timestamp=True) == [
        (b"v40", 40),
        (b"v30", 30),
        (b"v20", 20),
    ]
    assert table.cells(b"r", b"cg:a", versions=10) == [b"v40"]
    assert table.cells(b"r", b"cf:a", versions=2) == [b"v40", b"v30"]
    # Timestamp bounds are exclusive, as in HBase's Thrift1 server.
    assert table.row(b"r", timestamp=40, include_timestamp=True) == {b"cf:a": (b"v30", 30)}
    assert table.cells(b"r", b"cf:a", versions=10, timestamp=35) == [b"v30", b"v20"]
    # v10 is the 4th version: hidden for good, even in a time range that excludes newer ones.
    assert table.row(b"r", timestamp=20) == {}
    # Same timestamp again: the newer write replaces the cell.
    table.put(b"r", {b"cf:a": b"again"}, timestamp=40)
    assert table.cells(b"r", b"cf:a", versions=1, include_timestamp=True) == [(b"again", 40)]


def test_server_timestamps(table: happybase.Table) -> None:
    before = now_ms()
    table.put(b"r", {b"cf:a": b"1"})
    _value, ts = table.row(b"r", include_timestamp=True)[b"cf:a"]
    assert before - 1000 <= ts <= now_ms() + 1000


def test_ttl_expiry(conn: happybase.Connection) -> None:
    name = unique_name()
    conn.create_table(name, {"short": {"time_to_live": 5}, "long": {}})
    table = conn.table(name)
    old = now_ms() - 60_000
    table.put(b"r", {b"short:a": b"old", b"long:a": b"old"}, timestamp=old)
    table.put(b"r", {b"short:b": b"new"})
    assert table.row(b"r") == {b"long:a": b"old", b"short:b": b"new"}
    assert table.cells(b"r", b"short:a") == []
    assert [k for k, _ in table.scan()] == [b"r"]
    table.put(b"only-old", {b"short:a": b"x"}, timestamp=old)
    assert table.row(b"only-old") == {}
    assert [k for k, _ in table.scan()] == [b"r"]
    conn.delete_table(name, disable=True)


def test_deletes(table: happybase.Table) -> None:
    table.put(b"r", {b"cf:a": b"1", b"cf:b": b"2", b"cg:c": b"3"})
    table.delete(b"r", columns=[b"cf:a"])
    assert table.row(b"r") == {b"cf:b": b"2", b"cg:c": b"3"}
    table.delete(b"r", columns=[b"cf"])  # a whole family
    assert table.row(b"r") == {b"cg:c": b"3"}
    table.put(b"r", {b"cf:a": b"back"})
    table.delete(b"r")  # the whole row (happybase deletes every family)
    assert table.row(b"r") == {}


def test_delete_with_timestamp_removes_versions_up_to_it(table: happybase.Table) -> None:
    for ts in (10, 20, 30):
        table.put(b"r", {b"cf:a": b"v%d" % ts, b"cf:b": b"w%d" % ts}, timestamp=ts)
    table.delete(b"r", columns=[b"cf:a"], timestamp=20)
    assert table.cells(b"r", b"cf:a", versions=5) == [b"v30"]
    client, name = table.connection.client, table.name
    client.deleteAllTs(name, b"r", b"cf:b", 25, {})
    assert table.cells(b"r", b"cf:b", versions=5) == [b"w30"]
    client.deleteAllRowTs(name, b"r", 30, {})
    assert table.row(b"r") == {}
    # A put after a delete is visible even with an older timestamp (HBase's new version behavior).
    table.put(b"r", {b"cf:a": b"late"}, timestamp=5)
    assert table.row(b"r") == {b"cf:a": b"late"}


def test_delete_all_thrift_calls(table: happybase.Table) -> None:
    client, name = table.connection.client, table.name
    table.put(b"r", {b"cf:a": b"1", b"cf:b": b"2", b"cg:c": b"3"})
    client.deleteAll(name, b"r", b"cf:a", {})
    assert table.row(b"r") == {b"cf:b": b"2", b"cg:c": b"3"}
    client.deleteAll(name, b"r", b"cf", {})
    assert table.row(b"r") == {b"cg:c": b"3"}
    client.deleteAllRow(name, b"r", {})
    assert table.row(b"r") == {}


def test_batch_mixed_and_ordering(table: happybase.Table) -> None:
    with table.batch() as batch:
        for i in range(50):
            batch.put(b"row%02d" % i, {b"cf:n": b"%d" % i})
        batch.delete(b"row07", columns=[b"cf:n"])  # mutateRows applies puts, then deletes
    assert table.row(b"row07") == {}
    assert table.row(b"row49") == {b"cf:n": b"49"}
    # mutateRow applies a row's deletes before its puts.
    client, name = table.connection.client, table.name
    muts = [Mutation(isDelete=False, column=b"cf:n", value=b"new"), Mutation(isDelete=True, column=b"cf:n")]
    client.mutateRow(name, b"row08", muts, {})
    assert table.row(b"row08") == {b"cf:n": b"new"}
    client.mutateRowsTs(name, [BatchMutation(b"tsrow", [Mutation(column=b"cf:n", value=b"ts")])], 123, {})
    assert table.row(b"tsrow", include_timestamp=True) == {b"cf:n": (b"ts", 123)}


def test_transaction_batch_and_wal_flag(table: happybase.Table) -> None:
    with table.batch(transaction=True, wal=False) as batch:
        batch.put(b"a", {b"cf:x": b"1"})
        batch.put(b"b", {b"cf:x": b"2"})
    assert [k for k, _ in table.scan()] == [b"a", b"b"]


def test_mutation_errors(table: happybase.Table) -> None:
    client, name = table.connection.client, table.name
    with pytest.raises(IllegalArgument, match="Row length is 0"):
        table.put(b"", {b"cf:a": b"1"})
    with pytest.raises(IllegalArgument):
        table.put(b"r" * 40000, {b"cf:a": b"1"})
    with pytest.raises(IOError, match="NoSuchColumnFamilyException"):
        table.put(b"r", {b"cf:a": b"1", b"zz:a": b"2"})
    assert table.row(b"r") == {}  # the whole call failed: nothing half-written
    table.put(b"r", {b"cf": b"no qualifier", b"cf:ok": b"1"})  # HBase skips the qualifier-less put
    assert table.row(b"r") == {b"cf:ok": b"1"}
    client.mutateRow(name, b"r2", [Mutation(column=b"cf:none", value=None)], {})
    assert table.row(b"r2") == {b"cf:none": b""}


def test_counters(table: happybase.Table) -> None:
    assert table.counter_get(b"c", b"cf:n") == 0
    assert table.counter_inc(b"c", b"cf:n") == 1
    assert table.counter_inc(b"c", b"cf:n", 10) == 11
    assert table.counter_dec(b"c", b"cf:n", 3) == 8
    table.counter_set(b"c", b"cf:m", 2**62)
    assert table.counter_inc(b"c", b"cf:m", 2**62) == -(2**63)  # Java long wraps
    assert table.row(b"c")[b"cf:n"] == (8).to_bytes(8, "big")
    table.put(b"c", {b"cf:text": b"abc"})
    with pytest.raises(IOError, match="not a long"):
        table.counter_inc(b"c", b"cf:text")
    client, name = table.connection.client, table.name
    assert client.atomicIncrement(name, b"c", b"cg", 4) == 4  # family only: empty qualifier
    assert table.row(b"c", columns=[b"cg:"]) == {b"cg:": (4).to_bytes(8, "big")}


def test_get_and_other_thrift_reads(table: happybase.Table) -> None:
    client, name = table.connection.client, table.name
    table.put(b"r", {b"cf:a": b"1"}, timestamp=5)
    table.put(b"r", {b"cf:a": b"2"}, timestamp=6)
    assert [(c.value, c.timestamp) for c in client.get(name, b"r", b"cf:a", {})] == [(b"2", 6)]
    assert [c.value for c in client.getVerTs(name, b"r", b"cf:a", 6, 5, {})] == [b"1"]
    assert [r.row for r in client.getRowsTs(name, [b"r", b"x"], 6, {})] == [b"r"]
    assert client.getRowTs(name, b"r", 5, {}) == []
    with pytest.raises(IOError, match="not offered"):
        client.getRowOrBefore(name, b"r", b"cf")  # unimplemented: IOError, connection stays
    assert table.row(b"r") == {b"cf:a": b"2"}


def test_compaction_drops_hidden_versions(spawn: Callable[..., Gateway]) -> None:
    gw = spawn()
    conn = gw.connect()
    conn.create_table("c", {"cf": {"max_versions": 2}})
    table = conn.table("c")
    for ts in range(1, 6):
        table.put(b"r", {b"cf:a": b"%d" % ts}, timestamp=ts)
    conn.compact_table("c", major=True)
    assert table.cells(b"r", b"cf:a", versions=9) == [b"5", b"4"]
    assert gw.terminate() == 0
    db = sqlite3.connect(gw.data_dir / "hbase.sqlite3")
    (cells_table,) = db.execute("SELECT 'cells_' || id FROM hb_tables WHERE name = ?", (b"c",)).fetchone()
    assert db.execute(f"SELECT ts FROM {cells_table} ORDER BY ts").fetchall() == [(4,), (5,)]
    db.close()


def test_mutation_without_column_is_illegal_argument(table: happybase.Table) -> None:
    client, name = table.connection.client, table.name
    with pytest.raises(IllegalArgument, match="needs a column"):
        client.mutateRows(name, [BatchMutation(b"r", [Mutation(value=b"1")])], {})
    table.put(b"r", {b"cf:a": b"ok"})  # same connection, still fine
    assert table.row(b"r") == {b"cf:a": b"ok"}
