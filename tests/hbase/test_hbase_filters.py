"""The filter language on its own: grammar, HBase's comparison directions, combinators."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from deploy.hbase_gateway.filters import (
    AndFilter,
    FilterError,
    OrFilter,
    PrefixFilter,
    SkipFilter,
    WhileFilter,
    apply,
    parse_filter,
)

CELLS = [(b"cf:a", 3, b"apple"), (b"cf:b", 2, b"Banana"), (b"cg:c", 1, b"cherry")]


def kept(text: str, row: bytes = b"row1", cells: list = CELLS) -> list[bytes] | None:
    """Columns the filter keeps for the row, or None when the row is dropped."""
    out, _stop = apply(parse_filter(text), row, cells)
    return None if out is None else [c for c, _ts, _v in out]


@pytest.mark.parametrize(
    ("op", "expected"),
    [
        ("<", [b"cf:a"]),  # keeps values smaller than the comparator's
        ("<=", [b"cf:a"]),
        ("=", None),
        ("!=", [b"cf:a", b"cf:b", b"cg:c"]),
        (">=", [b"cf:b", b"cg:c"]),
        (">", [b"cf:b", b"cg:c"]),
    ],
)
def test_value_filter_compare_directions(op: str, expected: list[bytes] | None) -> None:
    cells = [(b"cf:a", 1, b"a"), (b"cf:b", 1, b"c"), (b"cg:c", 1, b"d")]
    assert kept(f"ValueFilter({op}, 'binary:b')", cells=cells) == expected


def test_row_filters() -> None:
    assert kept("PrefixFilter('row')") == [b"cf:a", b"cf:b", b"cg:c"]
    assert kept("PrefixFilter('rox')") is None
    assert kept("RowFilter(>=, 'binary:row1')") is not None
    assert kept("RowFilter(>, 'binary:row1')") is None
    assert kept("RowFilter(=, 'binaryprefix:ro')") is not None
    assert kept("RowFilter(=, 'regexstring:^r.w[0-9]$')") is not None
    assert kept("RowFilter(!=, 'substring:OW1')") is None  # substring is case-insensitive


def test_cell_filters() -> None:
    assert kept("FamilyFilter(=, 'binary:cg')") == [b"cg:c"]
    assert kept("QualifierFilter(<=, 'binary:b')") == [b"cf:a", b"cf:b"]
    assert kept("ValueFilter(=, 'substring:ANA')") == [b"cf:b"]
    assert kept("ValueFilter(=, 'regexstring:^ch')") == [b"cg:c"]
    assert kept("ColumnPrefixFilter('b')") == [b"cf:b"]
    assert kept("MultipleColumnPrefixFilter('a', 'c')") == [b"cf:a", b"cg:c"]
    assert kept("FirstKeyOnlyFilter()") == [b"cf:a"]
    assert kept("ColumnPrefixFilter('zz')") is None  # a row left without cells is dropped


def test_key_only_strips_values() -> None:
    out, _ = apply(parse_filter("KeyOnlyFilter()"), b"r", CELLS)
    assert out == [(c, ts, b"") for c, ts, _ in CELLS]
    out, _ = apply(parse_filter("KeyOnlyFilter(true)"), b"r", CELLS)
    assert out is not None and out[0][2] == (5).to_bytes(4, "big")


def test_single_column_value_filter() -> None:
    assert kept("SingleColumnValueFilter('cf', 'a', =, 'binary:apple')") == [b"cf:a", b"cf:b", b"cg:c"]
    assert kept("SingleColumnValueFilter('cf', 'a', !=, 'binary:apple')") is None
    # Missing column: kept by default, dropped with filterIfMissing.
    assert kept("SingleColumnValueFilter('cf', 'zz', =, 'binary:x')") is not None
    assert kept("SingleColumnValueFilter('cf', 'zz', =, 'binary:x', true, true)") is None
    assert kept("SingleColumnValueExcludeFilter('cf', 'a', =, 'binary:apple')") == [b"cf:b", b"cg:c"]


def test_single_column_value_filter_versions() -> None:
    cells = [(b"cf:a", 9, b"new"), (b"cf:a", 5, b"old")]
    assert kept("SingleColumnValueFilter('cf', 'a', =, 'binary:old')", cells=cells) is None
    flt = parse_filter("SingleColumnValueFilter('cf', 'a', =, 'binary:old', false, false)")
    assert flt.needs_all_versions()
    assert apply(flt, b"r", cells)[0] == cells


def test_and_or_precedence_and_parentheses() -> None:
    # AND binds tighter than OR.
    flt = parse_filter("PrefixFilter('a') AND PrefixFilter('b') OR PrefixFilter('row')")
    assert isinstance(flt, OrFilter) and isinstance(flt.children[0], AndFilter)
    assert kept("PrefixFilter('a') AND PrefixFilter('b') OR PrefixFilter('row')") is not None
    assert kept("PrefixFilter('a') AND (PrefixFilter('b') OR PrefixFilter('row'))") is None
    assert kept("FamilyFilter(=, 'binary:cf') AND QualifierFilter(=, 'binary:b')") == [b"cf:b"]
    assert kept("FamilyFilter(=, 'binary:cg') OR QualifierFilter(=, 'binary:a')") == [b"cf:a", b"cg:c"]


def test_skip_and_while() -> None:
    assert isinstance(parse_filter("SKIP ValueFilter(=, 'binary:x')"), SkipFilter)
    assert kept("SKIP ValueFilter(!=, 'binary:apple')") is None  # one cell fails: whole row goes
    assert kept("SKIP ValueFilter(!=, 'binary:zzz')") == [b"cf:a", b"cf:b", b"cg:c"]
    flt = parse_filter("WHILE PrefixFilter('row')")
    assert isinstance(flt, WhileFilter)
    assert apply(flt, b"row9", CELLS)[1] is False
    assert apply(flt, b"sow1", CELLS) == (None, True)  # first miss ends the scan
    # SKIP/WHILE bind tighter than AND.
    assert isinstance(parse_filter("SKIP PrefixFilter('a') AND PrefixFilter('b')"), AndFilter)


def test_page_limit_and_prefix_hints() -> None:
    assert parse_filter("PageFilter(5)").page_limit() == 5
    assert parse_filter("PageFilter(5) AND PageFilter(2)").page_limit() == 2
    assert parse_filter("PrefixFilter('ab') AND KeyOnlyFilter()").row_prefix() == b"ab"
    assert parse_filter("PrefixFilter('ab') OR PrefixFilter('cd')").row_prefix() is None
    assert parse_filter("WHILE PrefixFilter('ab')").row_prefix() is None  # would change semantics


def test_quoting_and_whitespace() -> None:
    flt = parse_filter("  PrefixFilter ( 'it''s' )  ")
    assert flt == PrefixFilter(b"it's")
    assert parse_filter(b"PrefixFilter('\xff\x00')") == PrefixFilter(b"\xff\x00")


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "NoSuchFilter()",
        "PrefixFilter(",
        "PrefixFilter('a'",
        "PrefixFilter('a') AND",
        "PrefixFilter('a') PrefixFilter('b')",
        "PrefixFilter(a)",
        "PageFilter('x')",
        "PageFilter(-1)",
        "ValueFilter(=, 'nocomparator')",
        "ValueFilter(=, 'weird:x')",
        "ValueFilter(<, 'substring:x')",  # substring/regex allow only = and !=
        "ValueFilter(=, 'regexstring:(')",
        "SingleColumnValueFilter('cf', 'a', =)",
        "SingleColumnValueFilter('cf', 'a', =, 'binary:x', maybe, true)",
        "KeyOnlyFilter(1)",
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
    apply(flt, b"row", CELLS)
