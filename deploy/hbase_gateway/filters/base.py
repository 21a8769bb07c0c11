"""The Filter protocol every HBase filter here implements, and what all the families share.

Why a module of its own: each family of filters (``compare``, ``keys``, ``columns``, ``values``,
``wrappers``, ``lists``) and the scan loop (``scan``) speak this protocol: the ``Filter`` base
class (HBase's ``FilterBase``), the ``ReturnCode`` a filter answers for each cell, the
``FilterError`` the filter language raises, and the small helpers that read a cell's family and
qualifier and order columns for seek hints.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import IntEnum

from ..cells import Cell, split_column


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
INCLUDES = frozenset({RC.INCLUDE, RC.INCLUDE_AND_NEXT_COL, RC.INCLUDE_AND_SEEK_NEXT_ROW})


def cell_family(cell: Cell) -> bytes:
    return split_column(cell[0])[0]


def cell_qualifier(cell: Cell) -> bytes:
    return split_column(cell[0])[1] or b""


def column_key(column: bytes) -> tuple[bytes, bytes]:
    family, qualifier = split_column(column)
    return family, qualifier or b""


def before_hint(column: bytes, hint: bytes) -> bool:
    """Whether a cell of ``column`` sorts before the hint "first cell of column ``hint``"."""
    return column_key(column) < column_key(hint)


def compare_bytes(a: bytes, b: bytes) -> int:
    return (a > b) - (a < b)


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
