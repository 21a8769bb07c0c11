"""Version and TTL visibility rules, without a server."""

from __future__ import annotations

from deploy.hbase_gateway.cells import (
    ColumnSelection,
    FamilyOptions,
    VersionPolicy,
    bytes_increment,
    split_column,
)

NOW = 1_000_000
FAMILIES = {b"cf": FamilyOptions(max_versions=2), b"tt": FamilyOptions(max_versions=5, time_to_live=10)}


def stored(*cells: tuple[bytes, bytes, int, bytes]) -> list[tuple[bytes, bytes, int, bytes]]:
    return list(cells)


ROW = stored(
    (b"r", b"cf:a", 300, b"v3"),
    (b"r", b"cf:a", 200, b"v2"),
    (b"r", b"cf:a", 100, b"v1"),  # beyond max_versions=2: never visible
    (b"r", b"tt:x", NOW - 5_000, b"fresh"),
    (b"r", b"tt:x", NOW - 20_000, b"expired"),
)


def test_split_column() -> None:
    assert split_column(b"cf") == (b"cf", None)
    assert split_column(b"cf:") == (b"cf", b"")
    assert split_column(b"cf:a:b") == (b"cf", b"a:b")


def test_latest_version_only() -> None:
    assert VersionPolicy(FAMILIES, at_ms=NOW).select(ROW) == [(b"cf:a", 300, b"v3"), (b"tt:x", NOW - 5_000, b"fresh")]


def test_versions_capped_by_family() -> None:
    got = VersionPolicy(FAMILIES, versions=10, at_ms=NOW).select(ROW)
    assert [v for _, _, v in got] == [b"v3", b"v2", b"fresh"]


def test_time_range_is_exclusive_and_counts_from_newest() -> None:
    # Below 300: v2 is visible; v1 stays hidden (third version) even though v3 is out of range.
    got = VersionPolicy(FAMILIES, versions=3, time_max=300, at_ms=NOW).select(ROW[:3])
    assert got == [(b"cf:a", 200, b"v2")]


def test_rows_grouping_simple_and_general_paths() -> None:
    many = stored((b"a", b"cf:a", 2, b"x"), (b"a", b"cf:a", 1, b"y"), (b"b", b"cf:b", 1, b"z"))
    simple = VersionPolicy({b"cf": FamilyOptions()}, at_ms=NOW)
    general = VersionPolicy({b"cf": FamilyOptions()}, versions=2, at_ms=NOW)
    assert simple.rows(many) == [(b"a", [(b"cf:a", 2, b"x")]), (b"b", [(b"cf:b", 1, b"z")])]
    assert general.rows(many) == [(b"a", [(b"cf:a", 2, b"x"), (b"cf:a", 1, b"y")]), (b"b", [(b"cf:b", 1, b"z")])]


def test_expired_rows_disappear() -> None:
    only_expired = stored((b"r", b"tt:x", NOW - 20_000, b"old"))
    assert VersionPolicy(FAMILIES, at_ms=NOW).rows(only_expired) == []


def test_garbage_is_what_compaction_drops() -> None:
    keys = [(r, c, ts) for r, c, ts, _ in ROW]
    assert VersionPolicy(FAMILIES, at_ms=NOW).garbage(keys) == [(b"r", b"cf:a", 100), (b"r", b"tt:x", NOW - 20_000)]


def test_column_selection() -> None:
    sel = ColumnSelection.parse([b"cf", b"cf:a", b"cg:b"])
    assert sel.families == {b"cf"} and sel.columns == {b"cg:b"}
    assert sel.referenced_families() == {b"cf", b"cg"}
    assert ColumnSelection.parse(None).everything


def test_helpers() -> None:
    assert bytes_increment(b"ab") == b"ac"
    assert bytes_increment(b"a\xff") == b"b"
    assert bytes_increment(b"\xff\xff") is None
