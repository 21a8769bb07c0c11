"""Every filter HBase's ParseFilter registers, through happybase against a gateway process.

The expected answers follow HBase's filter classes and its scan matcher (see the filters package): cells
are offered newest version first, up to the family's max versions, and a Thrift1 scan returns
the newest version of each column that the filter includes. NEXT_ROW leaves the rest of a
*family* (a store's row), so column-range style filters start over in the next family.
"""

from __future__ import annotations

import struct

import happybase
import pytest


@pytest.fixture
def data(table: happybase.Table) -> happybase.Table:
    """Families ``cf`` (3 versions) and ``cg`` (1 version); explicit timestamps."""
    table.put(b"r1", {b"cf:a": b"a1-old"}, timestamp=10)
    table.put(b"r1", {b"cf:a": b"a1", b"cf:b": b"b1", b"cf:c": b"c1", b"cg:a": b"g1"}, timestamp=20)
    table.put(b"r2", {b"cf:a": b"a2", b"cf:d": b"d2"}, timestamp=30)
    table.put(b"r2", {b"cg:b": b"g2"}, timestamp=15)
    table.put(b"r3", {b"cf:b": b"b3", b"cg:a": b"g3"}, timestamp=20)
    table.put(b"r4", {b"cf:a": b"a4"}, timestamp=20)
    return table


def scan(table: happybase.Table, flt: str, **kwargs: object) -> list[tuple[bytes, dict[bytes, bytes]]]:
    return list(table.scan(filter=flt, **kwargs))  # type: ignore[arg-type]


def columns(table: happybase.Table, flt: str, **kwargs: object) -> list[tuple[bytes, list[bytes]]]:
    return [(row, sorted(cells)) for row, cells in scan(table, flt, **kwargs)]


def test_column_pagination(data: happybase.Table) -> None:
    # Per row: skip 1 column, then return 2, counting across families in KeyValue order.
    assert columns(data, "ColumnPaginationFilter(2, 1)") == [
        (b"r1", [b"cf:b", b"cf:c"]),
        (b"r2", [b"cf:d", b"cg:b"]),
        (b"r3", [b"cg:a"]),
    ]
    assert columns(data, "ColumnPaginationFilter(1, 0)") == [
        (b"r1", [b"cf:a"]),
        (b"r2", [b"cf:a"]),
        (b"r3", [b"cf:b"]),
        (b"r4", [b"cf:a"]),
    ]


def test_column_count_get_ends_the_scan(data: happybase.Table) -> None:
    """Its count passes the limit inside r1, which makes filterAllRemaining() true."""
    assert columns(data, "ColumnCountGetFilter(2)") == [(b"r1", [b"cf:a", b"cf:b"])]
    assert columns(data, "ColumnCountGetFilter(4)", row_start=b"r2") == [
        (b"r2", [b"cf:a", b"cf:d", b"cg:b"]),
        (b"r3", [b"cf:b", b"cg:a"]),
        (b"r4", [b"cf:a"]),
    ]


def test_column_range(data: happybase.Table) -> None:
    # Past the range, NEXT_ROW leaves the family only: family cg is searched again.
    assert columns(data, "ColumnRangeFilter('b', true, 'c', true)") == [
        (b"r1", [b"cf:b", b"cf:c"]),
        (b"r2", [b"cg:b"]),
        (b"r3", [b"cf:b"]),
    ]
    assert columns(data, "ColumnRangeFilter('b', false, 'd', false)") == [(b"r1", [b"cf:c"])]
    assert columns(data, "ColumnRangeFilter('', true, 'a', true)") == [
        (b"r1", [b"cf:a", b"cg:a"]),
        (b"r2", [b"cf:a"]),
        (b"r3", [b"cg:a"]),
        (b"r4", [b"cf:a"]),
    ]


def test_inclusive_stop(data: happybase.Table) -> None:
    assert [r for r, _ in scan(data, "InclusiveStopFilter('r2')")] == [b"r1", b"r2"]
    assert [r for r, _ in scan(data, "InclusiveStopFilter('r2')", reverse=True)] == [b"r4", b"r3", b"r2"]


def test_timestamps_picks_older_versions(data: happybase.Table) -> None:
    assert scan(data, "TimestampsFilter(10, 30)") == [
        (b"r1", {b"cf:a": b"a1-old"}),  # the filter sees versions the plain read hides
        (b"r2", {b"cf:a": b"a2", b"cf:d": b"d2"}),
    ]
    assert scan(data, "TimestampsFilter()") == []


def test_dependent_column(data: happybase.Table) -> None:
    # Keeps the cells whose timestamp cf:a has in the same row (r1's cf:a has 20 and 10).
    assert columns(data, "DependentColumnFilter('cf', 'a')") == [
        (b"r1", [b"cf:a", b"cf:b", b"cf:c", b"cg:a"]),
        (b"r2", [b"cf:a", b"cf:d"]),  # cg:b is stamped 15
        (b"r4", [b"cf:a"]),
    ]
    assert columns(data, "DependentColumnFilter('cf', 'a', true)") == [
        (b"r1", [b"cf:b", b"cf:c", b"cg:a"]),
        (b"r2", [b"cf:d"]),
    ]
    # Only reference cells whose value passes count: r1's old cf:a (ts 10), which no other has.
    assert scan(data, "DependentColumnFilter('cf', 'a', false, =, 'binary:a1-old')") == [(b"r1", {b"cf:a": b"a1-old"})]


def test_column_value(data: happybase.Table) -> None:
    assert scan(data, "ColumnValueFilter('cf', 'a', =, 'binary:a2')") == [(b"r2", {b"cf:a": b"a2"})]
    assert scan(data, "ColumnValueFilter('cf', 'a', =, 'binary:a1-old')") == [(b"r1", {b"cf:a": b"a1-old"})]
    assert columns(data, "ColumnValueFilter('cf', 'a', >=, 'binary:a2')") == [(b"r2", [b"cf:a"]), (b"r4", [b"cf:a"])]


def test_single_column_value_filters(data: happybase.Table) -> None:
    assert columns(data, "SingleColumnValueFilter('cf', 'a', =, 'binary:a2')") == [
        (b"r2", [b"cf:a", b"cf:d", b"cg:b"]),
        (b"r3", [b"cf:b", b"cg:a"]),  # no cf:a at all: kept unless filterIfMissing
    ]
    assert [r for r, _ in scan(data, "SingleColumnValueFilter('cf', 'a', =, 'binary:a2', true, true)")] == [b"r2"]
    # latestVersionOnly=false: an older version may match; the row still shows the newest value.
    assert scan(data, "SingleColumnValueFilter('cf', 'a', =, 'binary:a1-old', true, false)") == [
        (b"r1", {b"cf:a": b"a1", b"cf:b": b"b1", b"cf:c": b"c1", b"cg:a": b"g1"})
    ]
    assert scan(data, "SingleColumnValueFilter('cf', 'a', =, 'binary:a1-old', true, true)") == []
    assert columns(data, "SingleColumnValueExcludeFilter('cf', 'a', =, 'binary:a2')") == [
        (b"r2", [b"cf:d", b"cg:b"]),
        (b"r3", [b"cf:b", b"cg:a"]),
    ]


def test_compare_filters(data: happybase.Table) -> None:
    assert [r for r, _ in scan(data, "RowFilter(>, 'binary:r2')")] == [b"r3", b"r4"]
    assert columns(data, "FamilyFilter(=, 'binary:cg')") == [(b"r1", [b"cg:a"]), (b"r2", [b"cg:b"]), (b"r3", [b"cg:a"])]
    assert columns(data, "QualifierFilter(>=, 'binary:c')") == [(b"r1", [b"cf:c"]), (b"r2", [b"cf:d"])]
    # ValueFilter also sees older versions: r1's cf:a answers with the version that matches.
    assert scan(data, "ValueFilter(=, 'regexstring:-old$')") == [(b"r1", {b"cf:a": b"a1-old"})]


def test_key_and_column_shape_filters(data: happybase.Table) -> None:
    assert scan(data, "KeyOnlyFilter()", row_stop=b"r2") == [
        (b"r1", {b"cf:a": b"", b"cf:b": b"", b"cf:c": b"", b"cg:a": b""})
    ]
    ((_row, cells),) = scan(data, "KeyOnlyFilter(true)", row_start=b"r4")
    assert cells == {b"cf:a": struct.pack(">i", 2)}
    assert scan(data, "FirstKeyOnlyFilter()", row_stop=b"r3") == [(b"r1", {b"cf:a": b"a1"}), (b"r2", {b"cf:a": b"a2"})]
    assert columns(data, "ColumnPrefixFilter('a')", row_stop=b"r2") == [(b"r1", [b"cf:a", b"cg:a"])]
    assert columns(data, "MultipleColumnPrefixFilter('c', 'a')") == [
        (b"r1", [b"cf:a", b"cf:c", b"cg:a"]),
        (b"r2", [b"cf:a"]),
        (b"r3", [b"cg:a"]),
        (b"r4", [b"cf:a"]),
    ]
    assert [r for r, _ in scan(data, "PrefixFilter('r3')")] == [b"r3"]
    assert [r for r, _ in scan(data, "PageFilter(2)")] == [b"r1", b"r2"]


def test_while_ends_the_scan_inside_a_row(data: happybase.Table) -> None:
    """The first cell the inner filter does not INCLUDE ends the scan; the row so far is kept."""
    assert scan(data, "WHILE ValueFilter(!=, 'binary:c1')") == [(b"r1", {b"cf:a": b"a1", b"cf:b": b"b1"})]
    assert [r for r, _ in scan(data, "WHILE RowFilter(<, 'binary:r3')")] == [b"r1", b"r2"]


def test_skip_drops_rows_with_any_rejected_cell(data: happybase.Table) -> None:
    assert [r for r, _ in scan(data, "SKIP ValueFilter(!=, 'binary:c1')")] == [b"r2", b"r3", b"r4"]


def test_or_list_unites_column_choices(data: happybase.Table) -> None:
    assert columns(data, "ColumnPrefixFilter('d') OR ColumnRangeFilter('b', true, 'b', true)") == [
        (b"r1", [b"cf:b"]),
        (b"r2", [b"cf:d", b"cg:b"]),
        (b"r3", [b"cf:b"]),
    ]


def test_and_list_order_matters_as_in_hbase(data: happybase.Table) -> None:
    """HBASE-20565: a child is asked only while the list still includes the cell, so a
    pagination filter placed first counts columns a later child rejects."""
    assert columns(data, "ColumnPaginationFilter(1, 0) AND ValueFilter(!=, 'binary:a1')") == [
        (b"r2", [b"cf:a"]),
        (b"r3", [b"cf:b"]),
        (b"r4", [b"cf:a"]),
    ]
    assert scan(data, "ValueFilter(!=, 'binary:a1') AND ColumnPaginationFilter(1, 0)", row_stop=b"r2") == [
        (b"r1", {b"cf:a": b"a1-old"})
    ]


def test_filters_with_columns_and_batching(data: happybase.Table) -> None:
    assert columns(data, "ColumnPaginationFilter(1, 1)", columns=[b"cf"]) == [
        (b"r1", [b"cf:b"]),
        (b"r2", [b"cf:d"]),
    ]
    assert list(data.scan(filter="PrefixFilter('r1')", batch_size=1, scan_batching=2)) == [
        (b"r1", {b"cf:a": b"a1", b"cf:b": b"b1"}),
        (b"r1", {b"cf:c": b"c1", b"cg:a": b"g1"}),
    ]
