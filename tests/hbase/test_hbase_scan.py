"""Scanners: ranges, direction, columns, batching, filters, leases."""

from __future__ import annotations

import time
from collections.abc import Callable

import happybase
import pytest
from Hbase_thrift import IllegalArgument, IOError, TScan

from deploy.processes.gateway import Gateway

KEYS = [b"a1", b"a2", b"b1", b"b2", b"b3", b"c1"]


@pytest.fixture
def filled(table: happybase.Table) -> happybase.Table:
    with table.batch() as batch:
        for i, key in enumerate(KEYS):
            batch.put(key, {b"cf:n": b"%d" % i, b"cf:tag": key[:1], b"cg:x": b"x" * i})
    return table


def keys(rows: object) -> list[bytes]:
    return [k for k, _ in rows]  # type: ignore[attr-defined]


def test_ranges(filled: happybase.Table) -> None:
    assert keys(filled.scan()) == KEYS
    assert keys(filled.scan(row_start=b"a2", row_stop=b"b3")) == [b"a2", b"b1", b"b2"]
    assert keys(filled.scan(row_start=b"b")) == [b"b1", b"b2", b"b3", b"c1"]
    assert keys(filled.scan(row_stop=b"b")) == [b"a1", b"a2"]
    assert keys(filled.scan(row_prefix=b"b")) == [b"b1", b"b2", b"b3"]
    assert keys(filled.scan(limit=2)) == [b"a1", b"a2"]


def test_reversed(filled: happybase.Table) -> None:
    assert keys(filled.scan(reverse=True)) == KEYS[::-1]
    # Reversed: start is the inclusive high end, stop the exclusive low end.
    assert keys(filled.scan(row_start=b"b2", row_stop=b"a1", reverse=True)) == [b"b2", b"b1", b"a2"]
    assert keys(filled.scan(row_prefix=b"b", reverse=True)) == [b"b3", b"b2", b"b1"]
    rows = dict(filled.scan(reverse=True, columns=[b"cf:n"]))
    assert rows[b"b1"] == {b"cf:n": b"2"}


def test_columns_timestamps_and_sorting(filled: happybase.Table) -> None:
    assert dict(filled.scan(columns=[b"cf:n"]))[b"a2"] == {b"cf:n": b"1"}
    assert dict(filled.scan(columns=[b"cg"]))[b"a1"] == {b"cg:x": b""}  # an empty value is still a cell
    filled.put(b"a1", {b"cf:n": b"old"}, timestamp=1)
    rows = dict(filled.scan(timestamp=2, include_timestamp=True))
    assert rows == {b"a1": {b"cf:n": (b"old", 1)}}
    ordered = next(filled.scan(row_start=b"b1", sorted_columns=True))[1]
    assert list(ordered) == [b"cf:n", b"cf:tag", b"cg:x"]


def test_small_batches_and_wide_rows(table: happybase.Table) -> None:
    wide = {b"cf:q%04d" % i: b"v" for i in range(700)}  # wider than a scan chunk
    with table.batch(batch_size=5000) as batch:
        for i in range(1200):
            batch.put(b"r%05d" % i, {b"cf:a": b"%d" % i})
        batch.put(b"r00500", wide)
    rows = list(table.scan(batch_size=7))
    assert keys(rows) == [b"r%05d" % i for i in range(1200)]
    assert len(rows[500][1]) == 701
    back = list(table.scan(batch_size=13, reverse=True))
    assert keys(back) == [b"r%05d" % i for i in reversed(range(1200))]
    assert len(back[1200 - 1 - 500][1]) == 701
    # scan_batching splits a row into pieces of at most that many columns.
    parts = list(table.scan(row_start=b"r00500", row_stop=b"r00501", scan_batching=300))
    assert [len(cols) for _, cols in parts] == [300, 300, 101]


@pytest.mark.parametrize(
    ("flt", "expected"),
    [
        ("PrefixFilter('b')", [b"b1", b"b2", b"b3"]),
        ("RowFilter(>, 'binary:b2')", [b"b3", b"c1"]),
        ("RowFilter(=, 'regexstring:.1$')", [b"a1", b"b1", b"c1"]),
        ("ValueFilter(=, 'binary:3')", [b"b2"]),
        ("QualifierFilter(=, 'binary:tag') AND ValueFilter(=, 'binary:c')", [b"c1"]),
        ("FamilyFilter(=, 'binary:cg') AND ValueFilter(!=, 'binary:')", [b"a2", b"b1", b"b2", b"b3", b"c1"]),
        ("SingleColumnValueFilter('cf', 'tag', =, 'binary:a')", [b"a1", b"a2"]),
        ("SingleColumnValueFilter('cf', 'nope', =, 'binary:a', true, true)", []),
        ("PrefixFilter('a') OR PrefixFilter('c')", [b"a1", b"a2", b"c1"]),
        ("(PrefixFilter('a') OR PrefixFilter('c')) AND ValueFilter(=, 'binary:5')", [b"c1"]),
        ("PageFilter(2)", [b"a1", b"a2"]),
        ("WHILE RowFilter(<, 'binary:b2')", [b"a1", b"a2", b"b1"]),
        ("SKIP ValueFilter(!=, 'binary:b')", [b"a1", b"a2", b"c1"]),
        ("ColumnPrefixFilter('ta') AND ValueFilter(=, 'substring:B')", [b"b1", b"b2", b"b3"]),
    ],
)
def test_filters(filled: happybase.Table, flt: str, expected: list[bytes]) -> None:
    assert keys(filled.scan(filter=flt)) == expected


def test_filter_shapes_rows(filled: happybase.Table) -> None:
    assert dict(filled.scan(filter="KeyOnlyFilter()", row_prefix=b"a2"))[b"a2"] == {
        b"cf:n": b"",
        b"cf:tag": b"",
        b"cg:x": b"",
    }
    assert dict(filled.scan(filter="FirstKeyOnlyFilter()"))[b"b1"] == {b"cf:n": b"2"}
    only_tag = dict(filled.scan(filter="ColumnPrefixFilter('tag')"))
    assert only_tag[b"c1"] == {b"cf:tag": b"c"}
    assert keys(filled.scan(filter="PrefixFilter('b')", reverse=True)) == [b"b3", b"b2", b"b1"]


def test_bad_filter_is_illegal_argument_and_connection_survives(filled: happybase.Table) -> None:
    with pytest.raises(IllegalArgument, match="Incorrect filter string"):
        list(filled.scan(filter="NoSuchFilter('x')"))
    with pytest.raises(IllegalArgument):
        list(filled.scan(filter="PrefixFilter('x'"))
    assert keys(filled.scan(row_prefix=b"c")) == [b"c1"]


def test_legacy_scanner_calls(filled: happybase.Table) -> None:
    client, name = filled.connection.client, filled.name

    def drain(sid: int) -> list[bytes]:
        out = [r.row for r in client.scannerGet(sid)]
        out += [r.row for r in client.scannerGetList(sid, 100)]
        client.scannerClose(sid)
        return out

    assert drain(client.scannerOpen(name, b"b2", [b"cf:n"], {})) == [b"b2", b"b3", b"c1"]
    assert drain(client.scannerOpenWithStop(name, b"a2", b"b2", [], {})) == [b"a2", b"b1"]
    assert drain(client.scannerOpenWithPrefix(name, b"b", None, {})) == [b"b1", b"b2", b"b3"]
    filled.put(b"a1", {b"cf:n": b"old"}, timestamp=1)
    assert drain(client.scannerOpenTs(name, b"", [b"cf:n"], 2, {})) == [b"a1"]
    assert drain(client.scannerOpenWithStopTs(name, b"", b"a2", [], 2, {})) == [b"a1"]
    old_compat = happybase.Connection("127.0.0.1", filled.connection.port, compat="0.90")
    assert keys(old_compat.table(name).scan(row_start=b"c")) == [b"c1"]
    sid = client.scannerOpenWithScan(name, TScan(startRow=b"a", stopRow=b"b"), {})
    assert [r.row for r in client.scannerGetList(sid, 10)] == [b"a1", b"a2"]
    assert client.scannerGetList(sid, 10) == []
    client.scannerClose(sid)
    with pytest.raises(IllegalArgument, match="scanner ID is invalid"):
        client.scannerGetList(sid, 10)
    with pytest.raises(IllegalArgument):
        client.scannerClose(987654)


def test_scanner_sees_missing_table_and_family(filled: happybase.Table) -> None:
    with pytest.raises(IOError, match="TableNotFoundException"):
        list(filled.connection.table("missing_table").scan())
    with pytest.raises(IOError, match="NoSuchColumnFamilyException"):
        list(filled.scan(columns=[b"zz"]))


def test_scanner_lease_expires(spawn: Callable[..., Gateway]) -> None:
    gw = spawn("--scanner-lease-seconds", "1")
    conn = gw.connect()
    conn.create_table("t", {"cf": {}})
    table = conn.table("t")
    for i in range(5):
        table.put(b"r%d" % i, {b"cf:a": b"1"})
    client = conn.client
    sid = client.scannerOpenWithScan(b"t", TScan(), {})
    assert len(client.scannerGetList(sid, 2)) == 2
    time.sleep(0.6)
    assert len(client.scannerGetList(sid, 1)) == 1  # each call renews the lease
    time.sleep(0.6)
    assert len(client.scannerGetList(sid, 1)) == 1
    time.sleep(2.0)
    with pytest.raises(IOError, match="lease expired"):
        client.scannerGetList(sid, 1)
    assert keys(table.scan()) == [b"r%d" % i for i in range(5)]
