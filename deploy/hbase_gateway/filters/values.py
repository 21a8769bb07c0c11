"""Filters on one reference column's value: SingleColumnValueFilter (and its Exclude variant),
DependentColumnFilter and ColumnValueFilter.

Why a module of its own: unlike the compare filters, these test a single named column and
decide the rest of the row (or its other cells) from it, keeping per-row state until ``reset``.
"""

from __future__ import annotations

from ..cells import Cell
from .base import RC, Filter, ReturnCode
from .comparators import Comparison


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
