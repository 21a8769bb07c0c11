"""The filter language's unary operators: SKIP (SkipFilter) and WHILE (WhileMatchFilter).

Why a module of its own: each wraps one inner filter, passes the protocol through to it and
turns its rejections into dropping the whole row (SKIP) or ending the scan (WHILE).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..cells import Cell
from .base import RC, Filter, ReturnCode


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
