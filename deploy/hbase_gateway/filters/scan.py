"""The scan loop that drives a filter tree over rows, and what the scanner asks of a tree.

``run`` mirrors what RegionScannerImpl and UserScanQueryMatcher do with the filters:

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

from collections.abc import Iterable, Iterator, Sequence

from ..cells import Cell, split_column
from .base import INCLUDES, RC, Filter, before_hint, cell_family
from .keys import PrefixFilter
from .lists import FilterListAnd
from .wrappers import WhileMatchFilter

Row = tuple[bytes, list[Cell]]


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
        family = cell_family(cell)
        if family == skip_family or column == skip_column:
            continue
        if hint is not None:
            if _family_of(hint) == family and before_hint(column, hint):
                continue
            hint = None
        if flt.filter_all_remaining():
            break
        code = flt.filter_cell(cell)
        if code in INCLUDES:
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
            if target is not None and not flt.reversed and before_hint(column, target):
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
