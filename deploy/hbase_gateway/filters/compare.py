"""HBase's CompareFilter family: RowFilter, FamilyFilter, QualifierFilter and ValueFilter.

Why a module of its own: these four apply one ``Comparison`` to one part of each cell (row key,
family, qualifier, value) and differ only in which part and in what a mismatch skips.
"""

from __future__ import annotations

from ..cells import Cell
from .base import RC, Filter, ReturnCode, cell_family, cell_qualifier
from .comparators import Comparison


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
        family = cell_family(cell)
        return RC.NEXT_ROW if family and self.comparison.filters_out(family) else RC.INCLUDE


class QualifierFilter(_CompareFilter):
    def filter_cell(self, cell: Cell) -> ReturnCode:
        return RC.SKIP if self.comparison.filters_out(cell_qualifier(cell)) else RC.INCLUDE


class ValueFilter(_CompareFilter):
    def filter_cell(self, cell: Cell) -> ReturnCode:
        return RC.SKIP if self.comparison.filters_out(cell[2]) else RC.INCLUDE
