"""Filters on a row's columns by qualifier: ColumnPrefixFilter, MultipleColumnPrefixFilter,
ColumnRangeFilter, and the column counters ColumnCountGetFilter and ColumnPaginationFilter.

Why a module of its own: these filters walk a row's qualifiers in order and answer with the
column-level return codes (NEXT_COL, SEEK_NEXT_USING_HINT with a column hint), whose handling
by the scan loop (``scan``) they rely on.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..cells import Cell
from .base import RC, Filter, ReturnCode, cell_family, cell_qualifier, compare_bytes


class ColumnPrefixFilter(Filter):
    def __init__(self, prefix: bytes) -> None:
        self.prefix = prefix

    def filter_cell(self, cell: Cell) -> ReturnCode:
        qualifier = cell_qualifier(cell)
        cmp = compare_bytes(qualifier[: len(self.prefix)], self.prefix)
        if len(qualifier) < len(self.prefix):
            return RC.SEEK_NEXT_USING_HINT if cmp <= 0 else RC.NEXT_ROW
        if cmp < 0:
            return RC.SEEK_NEXT_USING_HINT
        return RC.NEXT_ROW if cmp > 0 else RC.INCLUDE

    def next_cell_hint(self, cell: Cell) -> bytes | None:
        return cell_family(cell) + b":" + self.prefix


class MultipleColumnPrefixFilter(Filter):
    def __init__(self, prefixes: Iterable[bytes]) -> None:
        self.prefixes = sorted(set(prefixes))
        self.hint: bytes | None = None

    def filter_cell(self, cell: Cell) -> ReturnCode:
        qualifier = cell_qualifier(cell)
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
        return None if self.hint is None else cell_family(cell) + b":" + self.hint


class ColumnRangeFilter(Filter):
    def __init__(self, minimum: bytes | None, min_inclusive: bool, maximum: bytes | None, max_inclusive: bool):
        self.minimum, self.min_inclusive = minimum, min_inclusive
        self.maximum, self.max_inclusive = maximum, max_inclusive

    def filter_cell(self, cell: Cell) -> ReturnCode:
        qualifier = cell_qualifier(cell)
        cmp_min = 1 if self.minimum is None else compare_bytes(qualifier, self.minimum)
        if cmp_min < 0:
            return RC.SEEK_NEXT_USING_HINT
        if not self.min_inclusive and cmp_min == 0:
            return RC.SKIP
        if self.maximum is None:
            return RC.INCLUDE
        cmp_max = compare_bytes(qualifier, self.maximum)
        if cmp_max < 0 or (self.max_inclusive and cmp_max == 0):
            return RC.INCLUDE
        return RC.NEXT_ROW

    def next_cell_hint(self, cell: Cell) -> bytes | None:
        return cell_family(cell) + b":" + (self.minimum or b"")


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
