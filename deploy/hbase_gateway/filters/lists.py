"""FilterList: the filter language's AND (MUST_PASS_ALL) and OR (MUST_PASS_ONE).

Why a module of its own: combining the children's answers is HBase's own state machine (the
return-code merge tables, the seek hints, HBASE-17678's memory of each child's previous answer
in OR lists), and it is the subtlest part of the port.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..cells import Cell
from .base import INCLUDES, RC, Filter, ReturnCode, before_hint, cell_family, column_key


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
            if rc not in INCLUDES:  # later children must not count a cell that is not taken
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
        return min(hints, key=column_key) if self.reversed else max(hints, key=column_key)


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
        cmp = -1 if before_hint(column, hint) else 1
        return -cmp if self.reversed else cmp

    def _from_previous(self, f: Filter, cell: Cell, prev: Cell | None, code: RC | None) -> RC | None:
        if prev is None or code is None or code in (RC.INCLUDE, RC.SKIP):
            return None
        if code == _H:
            hint = f.next_cell_hint(prev)
            return _H if hint is not None and self._compare_to_hint(cell[0], hint) < 0 else None
        if code in (RC.NEXT_COL, RC.INCLUDE_AND_NEXT_COL):
            return RC.NEXT_COL if prev[0] == cell[0] else None
        return RC.NEXT_ROW if cell_family(prev) == cell_family(cell) else None

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
            self.included[i] = local in INCLUDES
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
        return max(hints, key=column_key) if self.reversed else min(hints, key=column_key)
