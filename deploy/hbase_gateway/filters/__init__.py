"""HBase's server-side filters, ported with their state machines, and the scan loop that drives them.

Why a port and not a row-at-a-time approximation: HBase's filters are stateful objects driven
cell by cell (``filterRowKey``, ``filterCell`` returning a ReturnCode, ``transformCell``,
``filterRowCells``, ``filterRow``, ``filterAllRemaining``, ``reset`` between rows), and many
answers that users rely on (ColumnPaginationFilter's offsets, WhileMatchFilter stopping inside a
row, SingleColumnValueFilter with ``latestVersionOnly=false``, OR lists) only come out of that
protocol. Each class mirrors ``org.apache.hadoop.hbase.filter.<Name>``; ``run`` (in ``scan``)
mirrors what RegionScannerImpl and UserScanQueryMatcher do with them.

The package, by family of filter, each module on top of the ones before it:

* ``base``        - the Filter protocol, ReturnCode, FilterError, shared cell helpers
* ``comparators`` - Comparator, Comparison and the compare operators
* ``compare``     - Row/Family/Qualifier/Value filters (one comparison per cell)
* ``keys``        - row-key range, page, first-key/key-only and timestamps filters
* ``columns``     - column prefix/range filters and the column counters
* ``values``      - filters on one reference column's value
* ``wrappers``    - SKIP and WHILE
* ``lists``       - the AND/OR filter lists
* ``scan``        - ``run``, the scan loop, and ``scan_prefix``

Sans-IO and free of Thrift. This ``__init__`` re-exports what the rest of the gateway uses (the
filter language builds the trees, the handler and scanners run them).
"""

from .base import Filter, FilterError
from .columns import (
    ColumnCountGetFilter,
    ColumnPaginationFilter,
    ColumnPrefixFilter,
    ColumnRangeFilter,
    MultipleColumnPrefixFilter,
)
from .comparators import COMPARE_OPS, Comparator, Comparison
from .compare import FamilyFilter, QualifierFilter, RowFilter, ValueFilter
from .keys import FirstKeyOnlyFilter, InclusiveStopFilter, KeyOnlyFilter, PageFilter, PrefixFilter, TimestampsFilter
from .lists import FilterListAnd, FilterListOr
from .scan import run, scan_prefix
from .values import ColumnValueFilter, DependentColumnFilter, SingleColumnValueFilter
from .wrappers import SkipFilter, WhileMatchFilter

__all__ = [
    "COMPARE_OPS",
    "ColumnCountGetFilter",
    "ColumnPaginationFilter",
    "ColumnPrefixFilter",
    "ColumnRangeFilter",
    "ColumnValueFilter",
    "Comparator",
    "Comparison",
    "DependentColumnFilter",
    "FamilyFilter",
    "Filter",
    "FilterError",
    "FilterListAnd",
    "FilterListOr",
    "FirstKeyOnlyFilter",
    "InclusiveStopFilter",
    "KeyOnlyFilter",
    "MultipleColumnPrefixFilter",
    "PageFilter",
    "PrefixFilter",
    "QualifierFilter",
    "RowFilter",
    "SingleColumnValueFilter",
    "SkipFilter",
    "TimestampsFilter",
    "ValueFilter",
    "WhileMatchFilter",
    "run",
    "scan_prefix",
]
