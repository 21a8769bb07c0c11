"""Filters on rows and on cells' keys, never on values: the row-key range (PrefixFilter,
InclusiveStopFilter), the row count (PageFilter), the first key of a row or the key alone
(FirstKeyOnlyFilter, KeyOnlyFilter), and the versions by timestamp (TimestampsFilter).

Why a module of its own: these filters take no comparator; they decide from the row key, the
position of a cell in its row or its timestamp (column-shaped ones are in ``columns``).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from ..cells import Cell
from .base import RC, Filter, ReturnCode, compare_bytes


class PrefixFilter(Filter):
    def __init__(self, prefix: bytes) -> None:
        self.prefix = prefix
        self.passed_prefix = False
        self.filter_out_row = True

    def filter_row_key(self, row: bytes) -> bool:
        cmp = compare_bytes(row[: len(self.prefix)], self.prefix)
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
        cmp = compare_bytes(self.stop_row, row)
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
