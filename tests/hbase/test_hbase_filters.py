"""The filter language on its own: grammar, argument rules, HBase's comparison directions, and
the scan loop over in-memory rows (the same rows go through a gateway in test_hbase_filter_scans)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from deploy.hbase_gateway.filter_language import BUILDERS, parse_filter
from deploy.hbase_gateway.filters import (
    FilterError,
    FilterListAnd,
    FilterListOr,
    PrefixFilter,
    SkipFilter,
    WhileMatchFilter,
    run,
    scan_prefix,
)

ROWS = [
    (b"row1", [(b"cf:a", 3, b"apple"), (b"cf:b", 2, b"Banana"), (b"cg:c", 1, b"cherry")]),
    (b"row2", [(b"cf:a", 5, b"avocado")]),
]


def scan(text: str, rows: list = ROWS) -> list[tuple[bytes, list[bytes]]]:
    """Rows and the columns the filter keeps, as a scan returns them."""
    return [(row, [c for c, _ts, _v in cells]) for row, cells in run(parse_filter(text), rows)]


def test_every_parse_filter_name_is_registered() -> None:
    """HBase 2.x ParseFilter's registry, name for name."""
    assert set(BUILDERS) == {
        b"KeyOnlyFilter", b"FirstKeyOnlyFilter", b"PrefixFilter", b"ColumnPrefixFilter",
        b"MultipleColumnPrefixFilter", b"ColumnCountGetFilter", b"PageFilter", b"ColumnPaginationFilter",
        b"InclusiveStopFilter", b"TimestampsFilter", b"RowFilter", b"FamilyFilter", b"QualifierFilter",
        b"ValueFilter", b"ColumnRangeFilter", b"SingleColumnValueFilter", b"SingleColumnValueExcludeFilter",
        b"DependentColumnFilter", b"ColumnValueFilter",
    }  # fmt: skip


@pytest.mark.parametrize(
    ("op", "expected"),
    [
        ("<", [b"cf:a"]),  # keeps values smaller than the comparator's
        ("<=", [b"cf:a"]),
        ("=", []),
        ("!=", [b"cf:a", b"cf:b", b"cg:c"]),
        (">=", [b"cf:b", b"cg:c"]),
        (">", [b"cf:b", b"cg:c"]),
    ],
)
def test_value_filter_compare_directions(op: str, expected: list[bytes]) -> None:
    rows = [(b"r", [(b"cf:a", 1, b"a"), (b"cf:b", 1, b"c"), (b"cg:c", 1, b"d")])]
    assert scan(f"ValueFilter({op}, 'binary:b')", rows) == ([(b"r", expected)] if expected else [])


def test_comparators() -> None:
    assert [r for r, _ in scan("RowFilter(=, 'binaryprefix:row')")] == [b"row1", b"row2"]
    assert [r for r, _ in scan("RowFilter(=, 'regexstring:^r.w2$')")] == [b"row2"]
    assert scan("ValueFilter(=, 'substring:ANA')") == [(b"row1", [b"cf:b"])]  # case-insensitive
    with pytest.raises(FilterError, match="comparatorType"):
        parse_filter("ValueFilter(=, 'Binary:x')")  # ParseFilter's type names are case-sensitive


def test_filters_are_stateful_per_scan() -> None:
    flt = parse_filter("PageFilter(1)")
    assert len(list(run(flt, ROWS))) == 1
    assert list(run(flt, ROWS)) == []  # a used tree stays used: each scan parses its own


def test_and_or_precedence_and_parentheses() -> None:
    # AND binds tighter than OR; SKIP/WHILE tighter than AND.
    flt = parse_filter("PrefixFilter('a') AND PrefixFilter('b') OR PrefixFilter('row')")
    assert isinstance(flt, FilterListOr) and isinstance(flt.filters[0], FilterListAnd)
    assert isinstance(parse_filter("SKIP PrefixFilter('a') AND PrefixFilter('b')"), FilterListAnd)
    assert isinstance(parse_filter("SKIP ValueFilter(=, 'binary:x')"), SkipFilter)
    assert isinstance(parse_filter("WHILE ValueFilter(=, 'binary:x')"), WhileMatchFilter)
    assert len(scan("PrefixFilter('a') AND PrefixFilter('b') OR PrefixFilter('row')")) == 2
    assert scan("PrefixFilter('a') AND (PrefixFilter('b') OR PrefixFilter('row'))") == []
    assert scan("FamilyFilter(=, 'binary:cf') AND QualifierFilter(=, 'binary:b')") == [(b"row1", [b"cf:b"])]


def test_scan_prefix_only_where_it_cannot_change_the_answer() -> None:
    assert scan_prefix(parse_filter("PrefixFilter('ab')")) == b"ab"
    assert scan_prefix(parse_filter("PrefixFilter('ab') AND KeyOnlyFilter()")) == b"ab"
    assert scan_prefix(parse_filter("PrefixFilter('ab') OR PrefixFilter('cd')")) is None
    assert scan_prefix(parse_filter("WHILE PrefixFilter('ab')")) is None
    assert scan_prefix(parse_filter("PrefixFilter('ab') AND WHILE RowFilter(>=, 'binary:b')")) is None


def test_quoting_and_whitespace() -> None:
    flt = parse_filter("  PrefixFilter ( 'it''s' )  ")
    assert isinstance(flt, PrefixFilter) and flt.prefix == b"it's"
    flt = parse_filter(b"PrefixFilter('\xff\x00')")
    assert isinstance(flt, PrefixFilter) and flt.prefix == b"\xff\x00"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "NoSuchFilter()",
        "FuzzyRowFilter('a')",  # exists in HBase, but ParseFilter does not register it
        "PrefixFilter(",
        "PrefixFilter('a'",
        "PrefixFilter('a') AND",
        "PrefixFilter('a') PrefixFilter('b')",
        "PrefixFilter(a)",
        "PrefixFilter('a', 'b')",
        "PageFilter('x')",
        "PageFilter(-1)",
        "PageFilter(2147483648)",
        "ValueFilter(=, 'nocomparator')",
        "ValueFilter(=, 'weird:x')",
        "ValueFilter(<, 'substring:x')",  # substring/regex allow only = and !=
        "ValueFilter(=, 'regexstring:(')",
        "SingleColumnValueFilter('cf', 'a', =)",
        "SingleColumnValueFilter('cf', 'a', =, 'binary:x', maybe, true)",
        "SingleColumnValueFilter('cf', 'a', =, 'binary:x', true)",
        "KeyOnlyFilter(1)",
        "FirstKeyOnlyFilter(true)",
        "ColumnPaginationFilter(1)",
        "ColumnPaginationFilter(1, -1)",
        "ColumnCountGetFilter(-2)",
        "ColumnRangeFilter('a', true, 'b')",
        "ColumnRangeFilter('a', yes, 'b', true)",
        "InclusiveStopFilter()",
        "TimestampsFilter(-1)",
        "TimestampsFilter('5')",
        "DependentColumnFilter('cf')",
        "DependentColumnFilter('cf', 'a', true, =)",
        "ColumnValueFilter('cf', 'a', =)",
        "ColumnValueFilter('cf', 'a', >, 'regexstring:x')",
        "MultipleColumnPrefixFilter()",
        "(PrefixFilter('a')",
        "AND",
        "PrefixFilter('a') @",
        "PrefixFilter('unterminated)",
    ],
)
def test_rejected(text: str) -> None:
    with pytest.raises(FilterError):
        parse_filter(text)


@given(st.binary(max_size=60) | st.text(alphabet="()',=<>! ANDORSKIPWHILEPrefixFilterValue0123:ab", max_size=60))
def test_never_crashes_on_garbage(text: bytes | str) -> None:
    """Whatever the input, the parser either returns a filter or raises FilterError."""
    try:
        flt = parse_filter(text)
    except FilterError:
        return
    list(run(flt, ROWS))
