"""HBase's server-side filters, ported with their state machines, and the scan loop that drives them.

Why a port and not a row-at-a-time approximation: HBase's filters are stateful objects driven
cell by cell (``filterRowKey``, ``filterCell`` returning a ReturnCode, ``transformCell``,
``filterRowCells``, ``filterRow``, ``filterAllRemaining``, ``reset`` between rows), and many
answers that users rely on (ColumnPaginationFilter's offsets, WhileMatchFilter stopping inside a
row, SingleColumnValueFilter with ``latestVersionOnly=false``, OR lists) only come out of that
protocol. Each class mirrors ``org.apache.hadoop.hbase.filter.<Name>``; ``run`` mirrors what
RegionScannerImpl and UserScanQueryMatcher do with them:

* a row is offered to ``filter_row_key`` first; a row it drops is skipped;
* then its cells, in KeyValue order (column ascending, newest version first), up to each
  family's ``max_versions`` of each column (the column tracker admits that many when a scan has
  a filter); NEXT_ROW skips the rest of the *family* (a store scanner's row), NEXT_COL the rest
  of the column, SEEK_NEXT_USING_HINT the columns before the hint;
* of the cells a filter includes, at most ``versions`` per column are returned (HBase's
  ``versionsAfterFilter``; Thrift1 scans ask for 1): the newest version the filter accepts;
* ``filter_row_cells`` and ``filter_row`` (through FilterWrapper) decide the row, then ``reset``.

Sans-IO and free of Thrift: the store feeds rows, the scanner registry consumes them. The one
known departure: a row with no visible cell in the requested columns never reaches the filter
(HBase offers its key to ``filterRowKey``), which only a row-key-stateful filter could notice.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import re2

from .cells import Cell, split_column


class FilterError(ValueError):
    """A filter string HBase's ParseFilter would reject; the client gets IllegalArgument."""


class ReturnCode(IntEnum):
    """``Filter.ReturnCode``: what the scan does with the cell just offered."""

    INCLUDE = 0
    INCLUDE_AND_NEXT_COL = 1
    INCLUDE_AND_SEEK_NEXT_ROW = 2
    SKIP = 3
    NEXT_COL = 4
    NEXT_ROW = 5
    SEEK_NEXT_USING_HINT = 6


RC = ReturnCode
_INCLUDES = frozenset({RC.INCLUDE, RC.INCLUDE_AND_NEXT_COL, RC.INCLUDE_AND_SEEK_NEXT_ROW})
Row = tuple[bytes, list[Cell]]


def _family(cell: Cell) -> bytes:
    return split_column(cell[0])[0]


def _qualifier(cell: Cell) -> bytes:
    return split_column(cell[0])[1] or b""


def _key(column: bytes) -> tuple[bytes, bytes]:
    family, qualifier = split_column(column)
    return family, qualifier or b""


def _before_hint(column: bytes, hint: bytes) -> bool:
    """Whether a cell of ``column`` sorts before the hint "first cell of column ``hint``"."""
    return _key(column) < _key(hint)


# --- comparisons -------------------------------------------------------------------------------

# CompareFilter.compare: ``r = comparator.compareTo(cell bytes)`` (comparator value first); True
# means "filter the cell out". LESS keeps cells smaller than the comparator's value, and so on.
_FILTERS_OUT: dict[bytes, Callable[[int], bool]] = {
    b"<": lambda r: r <= 0,
    b"<=": lambda r: r < 0,
    b"=": lambda r: r != 0,
    b"!=": lambda r: r == 0,
    b">=": lambda r: r > 0,
    b">": lambda r: r >= 0,
}
COMPARE_OPS = frozenset(_FILTERS_OUT)


def _cmp(a: bytes, b: bytes) -> int:
    return (a > b) - (a < b)


@dataclass(frozen=True)
class Comparator:
    """``binary:v``, ``binaryprefix:v``, ``substring:v`` or ``regexstring:v`` (ParseFilter's
    ``createComparator``; the type names are case-sensitive there too)."""

    kind: str
    value: bytes
    _regex: Any = field(default=None, compare=False, repr=False)  # a compiled re2 pattern

    @classmethod
    def parse(cls, text: bytes) -> Comparator:
        kind, sep, value = text.partition(b":")
        name = kind.decode("latin-1")
        if not sep:
            raise FilterError("Incorrect comparator")
        if name == "regexstring":
            return cls(name, value, _compile_regex(value))
        if name == "substring":
            return cls(name, value.lower())  # SubstringComparator lower-cases both sides
        if name in {"binary", "binaryprefix"}:
            return cls(name, value)
        raise FilterError(f"Incorrect comparatorType {name!r} (binary, binaryprefix, regexstring, substring)")

    @property
    def equality_only(self) -> bool:
        return self.kind in {"substring", "regexstring"}

    def compare_to(self, data: bytes) -> int:
        if self.kind == "binary":
            return _cmp(self.value, data)
        if self.kind == "binaryprefix":
            return _cmp(self.value, data[: len(self.value)])
        if self.kind == "substring":
            return 0 if self.value in data.lower() else 1
        assert self._regex is not None
        return 0 if self._regex.search(data) else 1


def _regex_options() -> Any:
    options = re2.Options()
    options.dot_nl = True  # RegexStringComparator compiles with Java's DOTALL
    options.encoding = re2.Options.Encoding.LATIN1  # its default charset: one character per byte
    options.log_errors = False  # a client's bad pattern is answered, not logged by RE2 on stderr
    return options


_REGEX_OPTIONS = _regex_options()


def _compile_regex(pattern: bytes) -> Any:
    """RegexStringComparator's pattern, compiled by RE2, whose matching time is linear in the
    input: a client's pattern such as ``(a+)+$`` cannot keep a gateway thread busy for hours
    with the GIL held, as Python's backtracking ``re`` would. RE2 has no backreferences nor
    lookaround (Java's regex has): such a pattern is refused with a clear error."""
    try:
        return re2.compile(pattern, _REGEX_OPTIONS)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise FilterError(
            f"bad or unsupported regular expression {pattern!r}: {reason} (the gateway matches with RE2, "
            "linear-time: no backreferences or lookaround)"
        ) from None


@dataclass(frozen=True)
class Comparison:
    op: bytes
    comparator: Comparator

    def filters_out(self, data: bytes) -> bool:
        return _FILTERS_OUT[self.op](self.comparator.compare_to(data))


# --- the Filter protocol -----------------------------------------------------------------------


class Filter:
    """``org.apache.hadoop.hbase.filter.FilterBase``: includes everything, keeps no state."""

    reversed = False

    def reset(self) -> None:
        """Called between rows."""

    def filter_all_remaining(self) -> bool:
        return False

    def filter_row_key(self, row: bytes) -> bool:
        """True drops the row before its cells are read."""
        return False

    def filter_cell(self, cell: Cell) -> ReturnCode:
        return RC.INCLUDE

    def transform_cell(self, cell: Cell) -> Cell:
        return cell

    def filter_row_cells(self, cells: list[Cell]) -> None:
        """May remove cells of the row, in place."""

    def has_filter_row(self) -> bool:
        return False

    def filter_row(self) -> bool:
        """True drops the row after its cells were seen."""
        return False

    def next_cell_hint(self, cell: Cell) -> bytes | None:
        """For SEEK_NEXT_USING_HINT: the column (``f:q``) of this row to seek to."""
        return None

    def set_reversed(self, reversed: bool) -> None:
        self.reversed = reversed

    def children(self) -> Sequence[Filter]:
        return ()


class _CompareFilter(Filter):
    def __init__(self, comparison: Comparison) -> None:
        self.comparison = comparison


class RowFilter(_CompareFilter):
    def __init__(self, comparison: Comparison) -> None:
        super().__init__(comparison)
        self.filter_out_row = False

    def reset(self) -> None:
        self.filter_out_row = False

    def filter_row_key(self, row: bytes) -> bool:
        if self.comparison.filters_out(row):
            self.filter_out_row = True
        return self.filter_out_row

    def filter_cell(self, cell: Cell) -> ReturnCode:
        return RC.NEXT_ROW if self.filter_out_row else RC.INCLUDE

    def filter_row(self) -> bool:
        return self.filter_out_row


class FamilyFilter(_CompareFilter):
    def filter_cell(self, cell: Cell) -> ReturnCode:
        family = _family(cell)
        return RC.NEXT_ROW if family and self.comparison.filters_out(family) else RC.INCLUDE


class QualifierFilter(_CompareFilter):
    def filter_cell(self, cell: Cell) -> ReturnCode:
        return RC.SKIP if self.comparison.filters_out(_qualifier(cell)) else RC.INCLUDE


class ValueFilter(_CompareFilter):
    def filter_cell(self, cell: Cell) -> ReturnCode:
        return RC.SKIP if self.comparison.filters_out(cell[2]) else RC.INCLUDE


class PrefixFilter(Filter):
    def __init__(self, prefix: bytes) -> None:
        self.prefix = prefix
        self.passed_prefix = False
        self.filter_out_row = True

    def filter_row_key(self, row: bytes) -> bool:
        cmp = _cmp(row[: len(self.prefix)], self.prefix)
        if (cmp > 0 and not self.reversed) or (cmp < 0 and self.reversed):
            self.passed_prefix = True
        self.filter_out_row = cmp != 0
        return self.filter_out_row

    def filter_cell(self, cell: Cell) -> ReturnCode:
        return RC.NEXT_ROW if self.filter_out_row else RC.INCLUDE

    def filter_row(self) -> bool:
        return self.filter_out_row

    def reset(self) -> None:
        self.filter_out_row = True

    def filter_all_remaining(self) -> bool:
        return self.passed_prefix


class InclusiveStopFilter(Filter):
    def __init__(self, stop_row: bytes) -> None:
        self.stop_row = stop_row
        self.done = False

    def filter_row_key(self, row: bytes) -> bool:
        cmp = _cmp(self.stop_row, row)
        self.done = cmp > 0 if self.reversed else cmp < 0
        return self.done

    def filter_cell(self, cell: Cell) -> ReturnCode:
        return RC.NEXT_ROW if self.done else RC.INCLUDE

    def filter_all_remaining(self) -> bool:
        return self.done


class KeyOnlyFilter(Filter):
    def __init__(self, length_as_value: bool = False) -> None:
        self.length_as_value = length_as_value

    def transform_cell(self, cell: Cell) -> Cell:
        value = struct.pack(">i", len(cell[2])) if self.length_as_value else b""
        return cell[0], cell[1], value


class FirstKeyOnlyFilter(Filter):
    def __init__(self) -> None:
        self.found = False

    def reset(self) -> None:
        self.found = False

    def filter_cell(self, cell: Cell) -> ReturnCode:
        if self.found:
            return RC.NEXT_ROW
        self.found = True
        return RC.INCLUDE


class ColumnPrefixFilter(Filter):
    def __init__(self, prefix: bytes) -> None:
        self.prefix = prefix

    def filter_cell(self, cell: Cell) -> ReturnCode:
        qualifier = _qualifier(cell)
        cmp = _cmp(qualifier[: len(self.prefix)], self.prefix)
        if len(qualifier) < len(self.prefix):
            return RC.SEEK_NEXT_USING_HINT if cmp <= 0 else RC.NEXT_ROW
        if cmp < 0:
            return RC.SEEK_NEXT_USING_HINT
        return RC.NEXT_ROW if cmp > 0 else RC.INCLUDE

    def next_cell_hint(self, cell: Cell) -> bytes | None:
        return _family(cell) + b":" + self.prefix


class MultipleColumnPrefixFilter(Filter):
    def __init__(self, prefixes: Iterable[bytes]) -> None:
        self.prefixes = sorted(set(prefixes))
        self.hint: bytes | None = None

    def filter_cell(self, cell: Cell) -> ReturnCode:
        qualifier = _qualifier(cell)
        lesser_or_equal = [p for p in self.prefixes if p <= qualifier]
        if lesser_or_equal:
            largest = lesser_or_equal[-1]
            if qualifier.startswith(largest):
                return RC.INCLUDE
            if len(lesser_or_equal) == len(self.prefixes):
                return RC.NEXT_ROW
            self.hint = self.prefixes[len(lesser_or_equal)]
            return RC.SEEK_NEXT_USING_HINT
        self.hint = self.prefixes[0]
        return RC.SEEK_NEXT_USING_HINT

    def next_cell_hint(self, cell: Cell) -> bytes | None:
        return None if self.hint is None else _family(cell) + b":" + self.hint


class ColumnRangeFilter(Filter):
    def __init__(self, minimum: bytes | None, min_inclusive: bool, maximum: bytes | None, max_inclusive: bool):
        self.minimum, self.min_inclusive = minimum, min_inclusive
        self.maximum, self.max_inclusive = maximum, max_inclusive

    def filter_cell(self, cell: Cell) -> ReturnCode:
        qualifier = _qualifier(cell)
        cmp_min = 1 if self.minimum is None else _cmp(qualifier, self.minimum)
        if cmp_min < 0:
            return RC.SEEK_NEXT_USING_HINT
        if not self.min_inclusive and cmp_min == 0:
            return RC.SKIP
        if self.maximum is None:
            return RC.INCLUDE
        cmp_max = _cmp(qualifier, self.maximum)
        if cmp_max < 0 or (self.max_inclusive and cmp_max == 0):
            return RC.INCLUDE
        return RC.NEXT_ROW

    def next_cell_hint(self, cell: Cell) -> bytes | None:
        return _family(cell) + b":" + (self.minimum or b"")


class ColumnCountGetFilter(Filter):
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.count = 0

    def reset(self) -> None:
        self.count = 0

    def filter_all_remaining(self) -> bool:
        return self.count > self.limit

    def filter_row_key(self, row: bytes) -> bool:
        return self.filter_all_remaining()

    def filter_cell(self, cell: Cell) -> ReturnCode:
        self.count += 1
        return RC.NEXT_COL if self.filter_all_remaining() else RC.INCLUDE_AND_NEXT_COL


class ColumnPaginationFilter(Filter):
    def __init__(self, limit: int, offset: int) -> None:
        self.limit, self.offset = limit, offset
        self.count = 0

    def reset(self) -> None:
        self.count = 0

    def filter_cell(self, cell: Cell) -> ReturnCode:
        if self.count >= self.offset + self.limit:
            return RC.NEXT_ROW
        code = RC.NEXT_COL if self.count < self.offset else RC.INCLUDE_AND_NEXT_COL
        self.count += 1
        return code


class PageFilter(Filter):
    def __init__(self, size: int) -> None:
        self.size = size
        self.accepted = 0

    def filter_all_remaining(self) -> bool:
        return self.accepted >= self.size

    def filter_row_key(self, row: bytes) -> bool:
        return self.filter_all_remaining()

    def has_filter_row(self) -> bool:
        return True

    def filter_row(self) -> bool:
        self.accepted += 1
        return self.accepted > self.size


class TimestampsFilter(Filter):
    def __init__(self, timestamps: Iterable[int]) -> None:
        self.timestamps = frozenset(timestamps)
        self.minimum = min(self.timestamps, default=2**63 - 1)

    def filter_cell(self, cell: Cell) -> ReturnCode:
        if cell[1] in self.timestamps:
            return RC.INCLUDE
        # The remaining versions of this column are older than every wanted timestamp.
        return RC.NEXT_COL if cell[1] < self.minimum else RC.SKIP


class SingleColumnValueFilter(Filter):
    """Keeps whole rows by one column's value; SingleColumnValueExcludeFilter (``exclude``)
    also removes the tested column from the rows it keeps."""

    def __init__(
        self,
        column: bytes,
        comparison: Comparison,
        filter_if_missing: bool = False,
        latest_version_only: bool = True,
        exclude: bool = False,
    ) -> None:
        self.column, self.comparison = column, comparison
        self.filter_if_missing, self.latest_version_only, self.exclude = filter_if_missing, latest_version_only, exclude
        self.found = self.matched = False

    def reset(self) -> None:
        self.found = self.matched = False

    def filter_cell(self, cell: Cell) -> ReturnCode:
        if self.matched:
            return RC.INCLUDE
        if self.latest_version_only and self.found:
            return RC.NEXT_ROW
        if cell[0] != self.column:
            return RC.INCLUDE
        self.found = True
        if self.comparison.filters_out(cell[2]):
            return RC.NEXT_ROW if self.latest_version_only else RC.INCLUDE
        self.matched = True
        return RC.INCLUDE

    def has_filter_row(self) -> bool:
        return True

    def filter_row(self) -> bool:
        return not self.matched if self.found else self.filter_if_missing

    def filter_row_cells(self, cells: list[Cell]) -> None:
        if self.exclude:
            cells[:] = [c for c in cells if c[0] != self.column]


class DependentColumnFilter(Filter):
    """Keeps the cells whose timestamp the reference column also has (in this row)."""

    def __init__(self, column: bytes, drop: bool = False, comparison: Comparison | None = None) -> None:
        self.column, self.drop, self.comparison = column, drop, comparison
        self.stamps: set[int] = set()

    def reset(self) -> None:
        self.stamps.clear()

    def filter_cell(self, cell: Cell) -> ReturnCode:
        if cell[0] != self.column:
            return RC.INCLUDE  # decided in filter_row_cells
        if self.comparison is not None and self.comparison.filters_out(cell[2]):
            return RC.SKIP
        self.stamps.add(cell[1])
        return RC.SKIP if self.drop else RC.INCLUDE

    def has_filter_row(self) -> bool:
        return True

    def filter_row_cells(self, cells: list[Cell]) -> None:
        cells[:] = [c for c in cells if c[1] in self.stamps]


class ColumnValueFilter(Filter):
    """Returns only the matching cells of one column (not the whole row, unlike SCVF)."""

    def __init__(self, column: bytes, comparison: Comparison) -> None:
        self.column, self.comparison = column, comparison
        self.found = False

    def reset(self) -> None:
        self.found = False

    def filter_cell(self, cell: Cell) -> ReturnCode:
        if cell[0] != self.column:
            return RC.NEXT_ROW if self.found else RC.NEXT_COL
        self.found = True
        return RC.SKIP if self.comparison.filters_out(cell[2]) else RC.INCLUDE


class SkipFilter(Filter):
    """SKIP: drops the whole row if the inner filter does not INCLUDE every cell offered."""

    def __init__(self, inner: Filter) -> None:
        self.inner = inner
        self.drop_row = False

    def reset(self) -> None:
        self.inner.reset()
        self.drop_row = False

    def filter_cell(self, cell: Cell) -> ReturnCode:
        code = self.inner.filter_cell(cell)
        self.drop_row = self.drop_row or code != RC.INCLUDE
        return code

    def transform_cell(self, cell: Cell) -> Cell:
        return self.inner.transform_cell(cell)

    def has_filter_row(self) -> bool:
        return True

    def filter_row(self) -> bool:
        return self.drop_row

    def set_reversed(self, reversed: bool) -> None:
        self.reversed = reversed
        self.inner.set_reversed(reversed)

    def children(self) -> Sequence[Filter]:
        return (self.inner,)


class WhileMatchFilter(Filter):
    """WHILE: the scan ends at the first row key, cell or row the inner filter rejects."""

    def __init__(self, inner: Filter) -> None:
        self.inner = inner
        self.done = False

    def reset(self) -> None:
        self.inner.reset()

    def filter_all_remaining(self) -> bool:
        return self.done or self.inner.filter_all_remaining()

    def filter_row_key(self, row: bytes) -> bool:
        value = self.inner.filter_row_key(row)
        self.done = self.done or value
        return value

    def filter_cell(self, cell: Cell) -> ReturnCode:
        code = self.inner.filter_cell(cell)
        self.done = self.done or code != RC.INCLUDE
        return code

    def transform_cell(self, cell: Cell) -> Cell:
        return self.inner.transform_cell(cell)

    def has_filter_row(self) -> bool:
        return True

    def filter_row(self) -> bool:
        value = self.inner.filter_row()
        self.done = self.done or value
        return value

    def set_reversed(self, reversed: bool) -> None:
        self.reversed = reversed
        self.inner.set_reversed(reversed)

    def children(self) -> Sequence[Filter]:
        return (self.inner,)


# --- FilterList --------------------------------------------------------------------------------


class _FilterList(Filter):
    def __init__(self, filters: Sequence[Filter]) -> None:
        self.filters = list(filters)

    def children(self) -> Sequence[Filter]:
        return self.filters

    def set_reversed(self, reversed: bool) -> None:
        self.reversed = reversed
        for f in self.filters:
            f.set_reversed(reversed)

    def filter_row_cells(self, cells: list[Cell]) -> None:
        for f in self.filters:
            f.filter_row_cells(cells)

    def has_filter_row(self) -> bool:
        return any(f.has_filter_row() for f in self.filters)


# FilterListWithAND.mergeReturnCode, "the maximal step rule": MERGE_AND[rc][local].
_I, _INC, _INR = RC.INCLUDE, RC.INCLUDE_AND_NEXT_COL, RC.INCLUDE_AND_SEEK_NEXT_ROW
_S, _NC, _NR, _H = RC.SKIP, RC.NEXT_COL, RC.NEXT_ROW, RC.SEEK_NEXT_USING_HINT
_MERGE_AND: dict[RC, dict[RC, RC]] = {
    _I: {_I: _I, _INC: _INC, _INR: _INR, _S: _S, _NC: _NC, _NR: _NR},
    _INC: {_I: _INC, _INC: _INC, _INR: _INR, _S: _NC, _NC: _NC, _NR: _NR},
    _INR: {_I: _INR, _INC: _INR, _INR: _INR, _S: _NR, _NC: _NR, _NR: _NR},
    _S: {_I: _S, _INC: _NC, _INR: _NR, _S: _S, _NC: _NC, _NR: _NR},
    _NC: {_I: _NC, _INC: _NC, _INR: _NR, _S: _NC, _NC: _NC, _NR: _NR},
    _NR: {_I: _NR, _INC: _NR, _INR: _NR, _S: _NR, _NC: _NR, _NR: _NR},
}
# FilterListWithOR.mergeReturnCode, "the minimal step rule": MERGE_OR[rc][local].
_MERGE_OR: dict[RC, dict[RC, RC]] = {
    _I: dict.fromkeys(RC, _I),
    _INC: {_I: _I, _INC: _INC, _INR: _INC, _S: _I, _NC: _INC, _NR: _INC, _H: _I},
    _INR: {_I: _I, _INC: _INC, _INR: _INR, _S: _I, _NC: _INC, _NR: _INR, _H: _I},
    _S: {_I: _I, _INC: _I, _INR: _I, _S: _S, _NC: _S, _NR: _S, _H: _S},
    _NC: {_I: _I, _INC: _INC, _INR: _INC, _S: _S, _NC: _NC, _NR: _NC, _H: _S},
    _NR: {_I: _I, _INC: _INC, _INR: _INR, _S: _S, _NC: _NC, _NR: _NR, _H: _S},
    _H: {_I: _I, _INC: _I, _INR: _I, _S: _S, _NC: _S, _NR: _S, _H: _H},
}


class FilterListAnd(_FilterList):
    """MUST_PASS_ALL (the filter language's AND)."""

    def __init__(self, filters: Sequence[Filter]) -> None:
        super().__init__(filters)
        self.seek_hint_filters: list[Filter] = []

    def reset(self) -> None:
        for f in self.filters:
            f.reset()
        self.seek_hint_filters.clear()

    def filter_row_key(self, row: bytes) -> bool:
        dropped = False
        for f in self.filters:  # every child sees the row key (PrefixFilter tracks it)
            if f.filter_all_remaining() or f.filter_row_key(row):
                dropped = True
        return dropped

    def filter_all_remaining(self) -> bool:
        return any(f.filter_all_remaining() for f in self.filters)

    def filter_cell(self, cell: Cell) -> ReturnCode:
        rc = RC.INCLUDE
        self.seek_hint_filters.clear()
        for f in self.filters:
            if f.filter_all_remaining():
                return RC.NEXT_ROW
            local = f.filter_cell(cell)
            if local == _H:
                self.seek_hint_filters.append(f)
            rc = _H if _H in (rc, local) else _MERGE_AND[local][rc]
            if rc not in _INCLUDES:  # later children must not count a cell that is not taken
                return rc
        return _H if self.seek_hint_filters else rc

    def transform_cell(self, cell: Cell) -> Cell:
        for f in self.filters:
            cell = f.transform_cell(cell)
        return cell

    def filter_row(self) -> bool:
        return any(f.filter_row() for f in self.filters)

    def next_cell_hint(self, cell: Cell) -> bytes | None:
        hints = [h for f in self.seek_hint_filters if not f.filter_all_remaining() if (h := f.next_cell_hint(cell))]
        if not hints:
            return None
        return min(hints, key=_key) if self.reversed else max(hints, key=_key)


class FilterListOr(_FilterList):
    """MUST_PASS_ONE (the filter language's OR), with HBASE-17678's memory of each child's
    previous answer: a child that asked to leave a column or family is not asked again there."""

    def __init__(self, filters: Sequence[Filter]) -> None:
        super().__init__(filters)
        n = len(self.filters)
        self.prev_codes: list[RC | None] = [None] * n
        self.prev_cells: list[Cell | None] = [None] * n
        self.included = [False] * n

    def reset(self) -> None:
        for i, f in enumerate(self.filters):
            f.reset()
            self.prev_codes[i] = self.prev_cells[i] = None
            self.included[i] = False

    def filter_row_key(self, row: bytes) -> bool:
        dropped = True
        for f in self.filters:
            if not f.filter_all_remaining() and not f.filter_row_key(row):
                dropped = False
        return dropped

    def filter_all_remaining(self) -> bool:
        return all(f.filter_all_remaining() for f in self.filters)

    def _compare_to_hint(self, column: bytes, hint: bytes) -> int:
        cmp = -1 if _before_hint(column, hint) else 1
        return -cmp if self.reversed else cmp

    def _from_previous(self, f: Filter, cell: Cell, prev: Cell | None, code: RC | None) -> RC | None:
        if prev is None or code is None or code in (RC.INCLUDE, RC.SKIP):
            return None
        if code == _H:
            hint = f.next_cell_hint(prev)
            return _H if hint is not None and self._compare_to_hint(cell[0], hint) < 0 else None
        if code in (RC.NEXT_COL, RC.INCLUDE_AND_NEXT_COL):
            return RC.NEXT_COL if prev[0] == cell[0] else None
        return RC.NEXT_ROW if _family(prev) == _family(cell) else None

    def filter_cell(self, cell: Cell) -> ReturnCode:
        rc: RC | None = None
        for i, f in enumerate(self.filters):
            self.included[i] = False
            if f.filter_all_remaining():
                continue
            local = self._from_previous(f, cell, self.prev_cells[i], self.prev_codes[i])
            if local is None:
                local = f.filter_cell(cell)
            self.prev_codes[i] = local
            self.prev_cells[i] = None if local in (RC.INCLUDE, RC.SKIP) else cell
            rc = local if rc is None else _MERGE_OR[rc][local]
            self.included[i] = local in _INCLUDES
        return RC.SKIP if rc is None else rc

    def transform_cell(self, cell: Cell) -> Cell:
        for f, included in zip(self.filters, self.included, strict=True):
            if included:
                cell = f.transform_cell(cell)
        return cell

    def filter_row(self) -> bool:
        return all(f.filter_row() for f in self.filters)

    def next_cell_hint(self, cell: Cell) -> bytes | None:
        hints: list[bytes] = []
        for f in self.filters:
            if f.filter_all_remaining():
                continue
            hint = f.next_cell_hint(cell)
            if hint is None:
                return None
            hints.append(hint)
        if not hints:
            return None
        return max(hints, key=_key) if self.reversed else min(hints, key=_key)


# --- the scan loop -----------------------------------------------------------------------------


def _row_cells(flt: Filter, cells: Sequence[Cell], versions: int) -> tuple[list[Cell], bool]:
    """UserScanQueryMatcher over one row: the cells the filter lets through, transformed, and
    whether the scan is over. A store scanner asks ``filterAllRemaining`` before each cell,
    including the first cell after the row, and closes for good when it is true (DONE_SCAN);
    here the row ends there and the scan after it."""
    out: list[Cell] = []
    skip_family = skip_column = hint = counted = None
    count = 0
    for cell in cells:
        column = cell[0]
        family = _family(cell)
        if family == skip_family or column == skip_column:
            continue
        if hint is not None:
            if _family_of(hint) == family and _before_hint(column, hint):
                continue
            hint = None
        if flt.filter_all_remaining():
            break
        code = flt.filter_cell(cell)
        if code in _INCLUDES:
            if column != counted:
                counted, count = column, 0
            count += 1
            if count > versions:  # more versions than the scan asked for
                if code == RC.INCLUDE_AND_SEEK_NEXT_ROW:
                    skip_family = family
                else:
                    skip_column = column
                continue
            out.append(flt.transform_cell(cell))
            if code == RC.INCLUDE_AND_NEXT_COL:
                skip_column = column
            elif code == RC.INCLUDE_AND_SEEK_NEXT_ROW:
                skip_family = family
        elif code == RC.NEXT_COL:
            skip_column = column
        elif code == RC.NEXT_ROW:  # a store scanner's row: the rest of this family
            skip_family = family
        elif code == RC.SEEK_NEXT_USING_HINT:
            target = flt.next_cell_hint(cell)
            # StoreScanner seeks only forward; otherwise (or in reversed scans) it steps on.
            if target is not None and not flt.reversed and _before_hint(column, target):
                hint = target
    return out, flt.filter_all_remaining()


def _family_of(column: bytes) -> bytes:
    return split_column(column)[0]


def run(flt: Filter, rows: Iterable[Row], versions: int = 1) -> Iterator[Row]:
    """RegionScannerImpl.nextRaw over rows: the rows (with their cells) the filter keeps."""
    has_filter_row = flt.has_filter_row()
    for row, cells in rows:
        if flt.filter_all_remaining():
            return
        if flt.filter_row_key(row):
            flt.reset()
            continue
        kept, done = _row_cells(flt, cells, versions)
        if kept and has_filter_row:
            flt.filter_row_cells(kept)  # FilterWrapper.filterRowCellsWithRet
            if kept and flt.filter_row():
                kept = []
        elif kept and flt.filter_row():
            kept = []
        flt.reset()
        if kept:
            yield row, kept
        if done:
            return


def walk(flt: Filter) -> Iterator[Filter]:
    yield flt
    for child in flt.children():
        yield from walk(child)


def scan_prefix(flt: Filter) -> bytes | None:
    """A row prefix a forward scan may start and stop at without changing the answer: a
    PrefixFilter, alone or in an AND list. Not with a WhileMatchFilter anywhere, which could end
    the scan at a row before the prefix (HBase offers those rows to every filter of the list)."""
    if isinstance(flt, PrefixFilter):
        return flt.prefix
    if isinstance(flt, FilterListAnd) and not any(isinstance(f, WhileMatchFilter) for f in walk(flt)):
        return next((f.prefix for f in flt.filters if isinstance(f, PrefixFilter)), None)
    return None
