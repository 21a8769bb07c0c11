"""Thrift1 ``Hbase`` service methods, translated onto the store.

Every method of the IDL is defined here, so a call never reaches a missing attribute (which
thriftpy2 would turn into a dropped connection); the few the gateway does not do raise HBase's
``IOError``. This layer only converts between Thrift structs and the store's plain tuples and
mirrors the Thrift1 server's argument conventions (``f`` means a whole family, ``*Ts`` reads
take an exclusive upper time bound, ``*Ts`` deletes an inclusive one). Errors are plain
``HBaseError``s; ``server.GatewayProcessor`` maps them onto the IDL's exceptions.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from operator import attrgetter
from typing import Any

from .cells import FOREVER, Cell, ColumnSelection, FamilyOptions, bytes_increment, split_column
from .errors import HBaseError, IllegalArgumentError, NotImplementedByGatewayError
from .filter_language import parse_filter
from .filters import Filter, FilterError, scan_prefix
from .idl import Hbase
from .limits import Limits, current_connection, too_many_bytes, too_many_rows
from .scanners import Row, Scanner, ScannerRegistry, scan_results
from .store import Mutation, ScanSpec, Store

TCell = Hbase.TCell
TColumn = Hbase.TColumn
TRowResult = Hbase.TRowResult
ColumnDescriptor = Hbase.ColumnDescriptor
TRegionInfo = Hbase.TRegionInfo
ALL_VERSIONS = 2**31 - 1  # the policy caps it at each family's max_versions

_descriptor_defaults = ColumnDescriptor()


def _family_options(desc: Any) -> tuple[bytes, FamilyOptions]:
    """HBase's ``colDescFromThrift``: unset fields take the IDL defaults, TTL -1 is forever."""

    def field(name: str) -> Any:
        value = getattr(desc, name, None)
        return getattr(_descriptor_defaults, name) if value is None else value

    name = _as_bytes(desc.name or b"")
    ttl = int(field("timeToLive"))
    options = FamilyOptions(
        max_versions=int(field("maxVersions")),
        time_to_live=FOREVER if ttl == -1 else ttl,
        compression=str(field("compression")).upper(),
        in_memory=bool(field("inMemory")),
        bloom_filter_type=str(field("bloomFilterType")),
        bloom_filter_vector_size=int(field("bloomFilterVectorSize")),
        bloom_filter_nb_hashes=int(field("bloomFilterNbHashes")),
        block_cache_enabled=bool(field("blockCacheEnabled")),
    )
    return split_column(name)[0], options


def _descriptor(family: bytes, o: FamilyOptions) -> Any:
    return ColumnDescriptor(
        name=family + b":",
        maxVersions=o.max_versions,
        compression=o.compression,
        inMemory=o.in_memory,
        bloomFilterType=o.bloom_filter_type,
        bloomFilterVectorSize=o.bloom_filter_vector_size,
        bloomFilterNbHashes=o.bloom_filter_nb_hashes,
        blockCacheEnabled=o.block_cache_enabled,
        timeToLive=o.time_to_live,
    )


def _as_bytes(value: bytes | str | None) -> bytes:
    if value is None:
        return b""
    return value.encode("utf-8") if isinstance(value, str) else bytes(value)


_mutation_fields = attrgetter("isDelete", "column", "value")


def _mutations(mutations: Sequence[Any] | None) -> list[Mutation]:
    """Thrift Mutations as store tuples; ``attrgetter`` keeps this at C speed for big batches
    (binary Text fields already arrive as bytes)."""
    return list(map(_mutation_fields, mutations or ()))


def _cells(cells: Sequence[Cell]) -> list[Any]:
    return [TCell(v, ts) for _c, ts, v in cells]


def _row_results(rows: Sequence[Row], sort_columns: bool = False) -> list[Any]:
    """The hot path of every read: cells are already in column order, so ``sortedColumns`` needs
    no sort, and the common map form is one comprehension per row."""
    cell, result = TCell, TRowResult
    if sort_columns:
        return [result(row, None, [TColumn(c, cell(v, ts)) for c, ts, v in cells]) for row, cells in rows]
    return [result(row, {c: cell(v, ts) for c, ts, v in cells}) for row, cells in rows]


def _batch_bytes(batches: Sequence[tuple[bytes, Sequence[Mutation]]]) -> int:
    """What a mutation batch weighs: its row keys, columns and values."""
    total = 0
    for row, mutations in batches:
        total += len(row or b"")
        for _d, column, value in mutations:
            total += len(column or b"") + len(value or b"")
    return total


def _to_i64(value: int) -> int:
    return (value + 2**63) % 2**64 - 2**63  # Java long arithmetic wraps


class HBaseHandler:
    """One instance serves every connection; all state lives in the store and the scanners."""

    def __init__(
        self,
        store: Store,
        scanners: ScannerRegistry,
        host: str = "127.0.0.1",
        port: int = 9090,
        limits: Limits | None = None,
    ):
        self.store = store
        self.scanners = scanners
        self.host = host
        self.port = port
        self.limits = limits or Limits()

    def _check_rows(self, what: str, count: int) -> None:
        if count > self.limits.max_rows_per_call:
            raise too_many_rows(what, count, self.limits.max_rows_per_call)

    def _mutate(self, table: bytes, batches: list[Any], timestamp: int | None, single_row: bool = False) -> None:
        weight = _batch_bytes(batches)
        if weight > self.limits.max_mutate_bytes:
            raise too_many_bytes(weight, self.limits.max_mutate_bytes)
        self.store.mutate(_as_bytes(table), batches, timestamp, single_row=single_row)

    # --- admin -----------------------------------------------------------------------------------

    def enableTable(self, tableName: bytes) -> None:
        self.store.set_enabled(_as_bytes(tableName), True)

    def disableTable(self, tableName: bytes) -> None:
        self.store.set_enabled(_as_bytes(tableName), False)

    def isTableEnabled(self, tableName: bytes) -> bool:
        return self.store.describe(_as_bytes(tableName)).enabled

    def compact(self, tableNameOrRegionName: bytes) -> None:
        self.store.compact(_as_bytes(tableNameOrRegionName))

    def majorCompact(self, tableNameOrRegionName: bytes) -> None:
        self.store.compact(_as_bytes(tableNameOrRegionName))

    def getTableNames(self) -> list[bytes]:
        return self.store.table_names()

    def getColumnDescriptors(self, tableName: bytes) -> dict[bytes, Any]:
        info = self.store.describe(_as_bytes(tableName))
        return {family + b":": _descriptor(family, o) for family, o in info.families.items()}

    def getTableRegions(self, tableName: bytes) -> list[Any]:
        """One region holds the whole table (there is one server)."""
        info = self.store.describe(_as_bytes(tableName))
        return [
            TRegionInfo(
                startKey=b"",
                endKey=b"",
                id=info.created_ms,
                name=b"%s,,%d.%032x." % (info.name, info.created_ms, info.id),
                version=1,
                serverName=self.host.encode(),
                port=self.port,
            )
        ]

    def createTable(self, tableName: bytes, columnFamilies: Sequence[Any] | None) -> None:
        families: dict[bytes, FamilyOptions] = {}
        for desc in columnFamilies or ():
            name, options = _family_options(desc)
            if name in families:
                raise IllegalArgumentError(f"Family {name!r} is specified twice")
            families[name] = options
        self.store.create_table(_as_bytes(tableName), families)

    def deleteTable(self, tableName: bytes) -> None:
        self.store.delete_table(_as_bytes(tableName))

    # --- point reads -----------------------------------------------------------------------------

    def _read(
        self, table: bytes, rows: Sequence[bytes], columns: Sequence[bytes] | None, ts: int | None, versions: int = 1
    ) -> list[Row]:
        self._check_rows("getRows", len(rows))
        selection = ColumnSelection.parse(_as_bytes(c) for c in columns or ())
        return self.store.get_rows(_as_bytes(table), [_as_bytes(r) for r in rows], selection, ts, versions)

    def _column_cells(self, table: bytes, row: bytes, column: bytes, ts: int | None, versions: int) -> list[Any]:
        if versions < 1:
            raise IllegalArgumentError("numVersions must be >= 1")
        found = self._read(table, [row], [column], ts, versions)
        return _cells(found[0][1]) if found else []

    def get(self, tableName: bytes, row: bytes, column: bytes, attributes: Any = None) -> list[Any]:
        return self._column_cells(tableName, row, column, None, 1)

    def getVer(
        self, tableName: bytes, row: bytes, column: bytes, numVersions: int, attributes: Any = None
    ) -> list[Any]:
        return self._column_cells(tableName, row, column, None, numVersions)

    def getVerTs(
        self, tableName: bytes, row: bytes, column: bytes, timestamp: int, numVersions: int, attributes: Any = None
    ) -> list[Any]:
        return self._column_cells(tableName, row, column, timestamp, numVersions)

    def getRow(self, tableName: bytes, row: bytes, attributes: Any = None) -> list[Any]:
        return _row_results(self._read(tableName, [row], None, None))

    def getRowWithColumns(self, tableName: bytes, row: bytes, columns: Any, attributes: Any = None) -> list[Any]:
        return _row_results(self._read(tableName, [row], columns, None))

    def getRowTs(self, tableName: bytes, row: bytes, timestamp: int, attributes: Any = None) -> list[Any]:
        return _row_results(self._read(tableName, [row], None, timestamp))

    def getRowWithColumnsTs(
        self, tableName: bytes, row: bytes, columns: Any, timestamp: int, attributes: Any = None
    ) -> list[Any]:
        return _row_results(self._read(tableName, [row], columns, timestamp))

    def getRows(self, tableName: bytes, rows: Any, attributes: Any = None) -> list[Any]:
        return _row_results(self._read(tableName, rows or [], None, None))

    def getRowsWithColumns(self, tableName: bytes, rows: Any, columns: Any, attributes: Any = None) -> list[Any]:
        return _row_results(self._read(tableName, rows or [], columns, None))

    def getRowsTs(self, tableName: bytes, rows: Any, timestamp: int, attributes: Any = None) -> list[Any]:
        return _row_results(self._read(tableName, rows or [], None, timestamp))

    def getRowsWithColumnsTs(
        self, tableName: bytes, rows: Any, columns: Any, timestamp: int, attributes: Any = None
    ) -> list[Any]:
        return _row_results(self._read(tableName, rows or [], columns, timestamp))

    # --- writes ----------------------------------------------------------------------------------

    def mutateRow(self, tableName: bytes, row: bytes, mutations: Any, attributes: Any = None) -> None:
        self.mutateRowTs(tableName, row, mutations, None, attributes)  # type: ignore[arg-type]

    def mutateRowTs(
        self, tableName: bytes, row: bytes, mutations: Any, timestamp: int | None, attributes: Any = None
    ) -> None:
        batch = [(_as_bytes(row), _mutations(mutations))]
        self._mutate(tableName, batch, timestamp, single_row=True)

    def mutateRows(self, tableName: bytes, rowBatches: Any, attributes: Any = None) -> None:
        self.mutateRowsTs(tableName, rowBatches, None, attributes)  # type: ignore[arg-type]

    def mutateRowsTs(self, tableName: bytes, rowBatches: Any, timestamp: int | None, attributes: Any = None) -> None:
        self._check_rows("mutateRows", len(rowBatches or ()))
        batches = [(b.row, _mutations(b.mutations)) for b in rowBatches or ()]
        self._mutate(tableName, batches, timestamp)

    def deleteAll(self, tableName: bytes, row: bytes, column: bytes, attributes: Any = None) -> None:
        self.store.delete_all(_as_bytes(tableName), _as_bytes(row), _as_bytes(column))

    def deleteAllTs(self, tableName: bytes, row: bytes, column: bytes, timestamp: int, attributes: Any = None) -> None:
        self.store.delete_all(_as_bytes(tableName), _as_bytes(row), _as_bytes(column), timestamp)

    def deleteAllRow(self, tableName: bytes, row: bytes, attributes: Any = None) -> None:
        self.store.delete_all(_as_bytes(tableName), _as_bytes(row), None)

    def deleteAllRowTs(self, tableName: bytes, row: bytes, timestamp: int, attributes: Any = None) -> None:
        self.store.delete_all(_as_bytes(tableName), _as_bytes(row), None, timestamp)

    def atomicIncrement(self, tableName: bytes, row: bytes, column: bytes, value: int) -> int:
        def add(_column: bytes, old: Cell | None) -> bytes:
            base = 0
            if old is not None:
                if len(old[2]) != 8:
                    raise HBaseError(f"Field is not a long, it's {len(old[2])} bytes wide")
                base = struct.unpack(">q", old[2])[0]
            return struct.pack(">q", _to_i64(base + int(value or 0)))

        (cell,) = self.store.read_modify_write(_as_bytes(tableName), _as_bytes(row), [_as_bytes(column)], add)
        return int(struct.unpack(">q", cell[2])[0])

    def increment(self, increment: Any) -> None:
        self.atomicIncrement(increment.table, increment.row, increment.column, increment.ammount)

    def incrementRows(self, increments: Any) -> None:
        for inc in increments or ():
            self.increment(inc)

    def append(self, append: Any) -> list[Any]:
        columns = [_as_bytes(c) for c in append.columns or ()]
        values = [_as_bytes(v) for v in append.values or ()]
        if len(columns) != len(values):
            raise IllegalArgumentError("append needs one value per column")
        suffix = dict(zip(columns, values, strict=True))

        def extend(column: bytes, old: Cell | None) -> bytes:
            key = column if column in suffix else column.rstrip(b":")
            return (old[2] if old else b"") + suffix[key]

        cells = self.store.read_modify_write(_as_bytes(append.table), _as_bytes(append.row), columns, extend)
        return _cells(cells)

    def checkAndPut(
        self, tableName: bytes, row: bytes, column: bytes, value: bytes | None, mput: Any, attributes: Any = None
    ) -> bool:
        return self.store.check_and_mutate(
            _as_bytes(tableName), _as_bytes(row), _as_bytes(column), value, _mutations([mput] if mput else [])
        )

    # --- scanners --------------------------------------------------------------------------------

    def _open(
        self,
        table: bytes,
        spec: ScanSpec,
        flt: Filter | None = None,
        batch: int | None = None,
        sort_columns: bool = False,
        error: HBaseError | None = None,
    ) -> int:
        rows = self.store.scan(_as_bytes(table), spec)
        results = iter(()) if error else scan_results(rows, flt, batch)
        return self.scanners.open(Scanner(results, _as_bytes(table), sort_columns, error, owner=current_connection()))

    def scannerOpenWithScan(self, tableName: bytes, scan: Any, attributes: Any = None) -> int:
        """The IDL lets scannerOpenWithScan throw only IOError, so a bad filter string is kept on
        the scanner and raised as IllegalArgument by its first scannerGet/scannerGetList, which
        is the same step of happybase's ``scan()`` generator."""
        if scan.caching:  # happybase's batch_size: the rows it will ask for per scannerGetList
            self._check_rows("scan caching", scan.caching)
        flt: Filter | None = None
        error: HBaseError | None = None
        if scan.filterString:
            try:
                flt = parse_filter(_as_bytes(scan.filterString))
            except FilterError as exc:
                error = IllegalArgumentError(f"Incorrect filter string: {exc}")
            except RecursionError:  # thousands of nested parentheses or SKIP/WHILE prefixes
                error = IllegalArgumentError("Incorrect filter string: nested too deeply")
        start, stop = _as_bytes(scan.startRow), _as_bytes(scan.stopRow)
        if flt is not None:
            flt.set_reversed(bool(scan.reversed))
        prefix = scan_prefix(flt) if flt is not None else None
        if prefix and not scan.reversed:  # a PrefixFilter narrows the key range to read
            start = max(start, prefix)
            end = bytes_increment(prefix)
            if end is not None:
                stop = min(stop, end) if stop else end
        spec = ScanSpec(
            start=start,
            stop=stop,
            reverse=bool(scan.reversed),
            columns=ColumnSelection.parse(_as_bytes(c) for c in scan.columns or ()),
            time_max=scan.timestamp,
            # With a filter HBase's column tracker admits each family's max versions; the filter
            # picks among them and the scan returns the newest one it includes.
            versions=ALL_VERSIONS if flt is not None else 1,
        )
        batch = scan.batchSize if scan.batchSize and scan.batchSize > 0 else None
        return self._open(tableName, spec, flt, batch, bool(scan.sortColumns), error)

    def _open_range(self, table: bytes, start: bytes, stop: bytes | None, columns: Any, timestamp: int | None) -> int:
        selection = ColumnSelection.parse(_as_bytes(c) for c in columns or ())
        spec = ScanSpec(_as_bytes(start), _as_bytes(stop), columns=selection, time_max=timestamp)
        return self._open(table, spec)

    def scannerOpen(self, tableName: bytes, startRow: bytes, columns: Any, attributes: Any = None) -> int:
        return self._open_range(tableName, startRow, None, columns, None)

    def scannerOpenWithStop(
        self, tableName: bytes, startRow: bytes, stopRow: bytes, columns: Any, attributes: Any = None
    ) -> int:
        return self._open_range(tableName, startRow, stopRow, columns, None)

    def scannerOpenWithPrefix(
        self, tableName: bytes, startAndPrefix: bytes, columns: Any, attributes: Any = None
    ) -> int:
        prefix = _as_bytes(startAndPrefix)
        return self._open_range(tableName, prefix, bytes_increment(prefix) or b"", columns, None)

    def scannerOpenTs(
        self, tableName: bytes, startRow: bytes, columns: Any, timestamp: int, attributes: Any = None
    ) -> int:
        return self._open_range(tableName, startRow, None, columns, timestamp)

    def scannerOpenWithStopTs(
        self, tableName: bytes, startRow: bytes, stopRow: bytes, columns: Any, timestamp: int, attributes: Any = None
    ) -> int:
        return self._open_range(tableName, startRow, stopRow, columns, timestamp)

    def scannerGetList(self, id: int, nbRows: int) -> list[Any]:
        self._check_rows("scannerGetList", nbRows)
        rows, scanner = self.scanners.next_rows(id, nbRows)
        return _row_results(rows, scanner.sorted_columns)

    def scannerGet(self, id: int) -> list[Any]:
        return self.scannerGetList(id, 1)

    def scannerClose(self, id: int) -> None:
        self.scanners.close(id)

    # --- not offered -----------------------------------------------------------------------------

    def getRowOrBefore(self, tableName: bytes, row: bytes, family: bytes) -> list[Any]:
        raise NotImplementedByGatewayError("getRowOrBefore is deprecated in HBase and not offered by this gateway")

    def getRegionInfo(self, row: bytes) -> Any:
        raise NotImplementedByGatewayError("getRegionInfo is not offered by this gateway")
