"""The durable, sorted cell store behind the gateway: SQLite (stdlib) in WAL mode.

Why SQLite: it is a sorted B-tree store with transactions, in the standard library, with no
server to run. One SQL table per HBase table, ``WITHOUT ROWID`` with primary key
``(row, col, ts DESC)``, is HBase's own KeyValue order, so a row-range scan is an index range
scan that yields cells newest version first, and a reversed scan walks the same index backwards.

Durability: each Thrift mutation call (mutateRow(s), deleteAll*, atomicIncrement, ...) is one
transaction, committed before the call returns. In WAL mode a commit appends the transaction to
the ``-wal`` file with ``write()`` before returning; with ``synchronous=NORMAL`` SQLite skips the
fsync on commit (it syncs at checkpoints). A write that reached the OS page cache survives
``kill -9`` of the gateway process, which is the requirement here; only a power loss or kernel
crash can drop the last commits (use ``synchronous=FULL`` via ``Store(sync_full=True)`` for that).
The schemas of the HBase tables are rows of a catalog table in the same database, so they are as
durable as the data.

Concurrency: one writer connection behind a lock (SQLite has one writer per database anyway) and
a pool of reader connections, which WAL lets read while the writer commits. Scans never keep a
SQLite statement open between chunks, so an idle scanner never pins an old snapshot or blocks
WAL checkpoints.

Deletes follow HBase's NEW_VERSION_BEHAVIOR: a delete removes the versions it covers
(timestamp <= the delete's) when it is applied, and a later put is visible even if its timestamp
is older. So no tombstones are kept, and compaction only enforces max versions and TTL.
"""

from __future__ import annotations

import logging
import queue
import re
import sqlite3
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Final, Literal

from .cells import (
    FOREVER,
    Cell,
    ColumnSelection,
    FamilyOptions,
    StoredCell,
    VersionPolicy,
    dump_families,
    family_end,
    load_families,
    now_ms,
    split_column,
)
from .errors import (
    HBaseError,
    IllegalArgumentError,
    NoSuchColumnFamilyError,
    RetriesExhaustedError,
    TableExistsError,
    TableNotDisabledError,
    TableNotEnabledError,
    TableNotFoundError,
)

log = logging.getLogger(__name__)

DB_FILE = "hbase.sqlite3"
MAX_ROW_LENGTH = 32767  # HBase's Short.MAX_VALUE row key limit
_TABLE_NAME = re.compile(rb"^(?:[A-Za-z0-9_]+:)?[A-Za-z0-9_][A-Za-z0-9_.-]*$")
_FIRST_CHUNK, _MAX_CHUNK = 256, 16384  # cells per scan query; grows as a scan goes on
_COMPACT_CHUNK = 20000
_CHECKPOINT_WAL_BYTES = 32 << 20

Mutation = tuple[bool, bytes, bytes | None]
"""``(is_delete, column, value)``: a Thrift Mutation without its Thrift type."""
RowMutations = tuple[bytes, Sequence[Mutation]]


@dataclass(frozen=True)
class TableInfo:
    name: bytes
    id: int
    enabled: bool
    families: dict[bytes, FamilyOptions]
    created_ms: int

    @property
    def sql(self) -> str:
        return f"cells_{self.id}"


@dataclass(frozen=True)
class ScanSpec:
    """A row range read. ``start``/``stop`` empty mean unbounded; reversed scans go from
    ``start`` (inclusive, the high end) down to ``stop`` (exclusive), as in HBase."""

    start: bytes = b""
    stop: bytes = b""
    reverse: bool = False
    columns: ColumnSelection = field(default_factory=ColumnSelection)
    time_max: int | None = None
    versions: int = 1


class Store:
    """HBase tables of cells in one SQLite database under ``data_dir``."""

    def __init__(self, data_dir: Path | str, readers: int = 4, sync_full: bool = False) -> None:
        self.path = Path(data_dir) / DB_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._sync = "FULL" if sync_full else "NORMAL"
        self._writer = self._connect()
        # Checkpoints (WAL -> database file, with fsyncs) run on a background thread once the WAL
        # passes 32 MiB, not inside a client's commit every 4 MiB as SQLite does by default:
        # hash-spread row keys dirty a page per cell, so a batch of 1,000 rows writes ~10 MiB of
        # WAL, and a commit that had to checkpoint took 60-150 ms. The writer still checkpoints
        # itself past 256 MiB should the background fall behind.
        self._writer.execute("PRAGMA wal_autocheckpoint=65536")
        self._writer.execute("PRAGMA journal_size_limit=67108864")
        self._write_lock = threading.Lock()
        self._readers: queue.LifoQueue[sqlite3.Connection] = queue.LifoQueue()
        self._max_idle_readers = readers
        self._dirty: set[bytes] = set()
        self._closed = False
        self._writer.execute(
            "CREATE TABLE IF NOT EXISTS hb_tables (id INTEGER PRIMARY KEY AUTOINCREMENT,"
            " name BLOB NOT NULL UNIQUE, enabled INTEGER NOT NULL, families TEXT NOT NULL,"
            " created_ms INTEGER NOT NULL)"
        )
        self._tables: dict[bytes, TableInfo] = {
            bytes(name): TableInfo(bytes(name), tid, bool(enabled), load_families(fams), created)
            for tid, name, enabled, fams, created in self._writer.execute(
                "SELECT id, name, enabled, families, created_ms FROM hb_tables"
            )
        }
        self._dirty.update(self._tables)
        self._writer.execute("CREATE TABLE IF NOT EXISTS hb_meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL)")
        row = self._writer.execute("SELECT value FROM hb_meta WHERE key = 'clock'").fetchone()
        self._last_ts = int(row[0]) if row else 0
        self._stop = threading.Event()
        self._checkpointer = threading.Thread(target=self._checkpoint_loop, name="checkpointer", daemon=True)
        self._checkpointer.start()

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={self._sync}")
        conn.execute("PRAGMA cache_size=-65536")  # 64 MiB: random-key inserts stay in cache longer
        conn.execute("PRAGMA temp_store=MEMORY")
        conn.execute("PRAGMA mmap_size=268435456")
        return conn

    # --- plumbing --------------------------------------------------------------------------------

    @contextmanager
    def _reader(self) -> Iterator[sqlite3.Connection]:
        try:
            conn = self._readers.get_nowait()
        except queue.Empty:
            conn = self._connect()
        try:
            yield conn
        finally:
            if self._closed or self._readers.qsize() >= self._max_idle_readers:
                conn.close()
            else:
                self._readers.put(conn)

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """The single writer, in one transaction: committed on success, rolled back on error."""
        with self._write_lock:
            if self._closed:
                raise HBaseError("gateway is shutting down")
            conn = self._writer
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def _clock(self, conn: sqlite3.Connection, at_least: int = 0) -> int:
        """Server timestamp for a write (call inside ``_transaction``): wall-clock ms, never
        below any timestamp handed out before, nor below ``at_least``.

        Why one clock for every write: HBase gives an increment ``max(now, old ts + 1)``, which
        runs ahead of the wall clock when a cell is incremented several times in a millisecond;
        a put stamped with the plain wall clock right after would sort below it and stay hidden
        forever. Here that put takes the increment's timestamp (same timestamp, later write:
        the put wins, as in HBase). The clock is stored with the write whenever it runs ahead of
        the wall clock, so a restart cannot hand out smaller timestamps.
        """
        now = now_ms()
        ts = max(now, self._last_ts, at_least)
        if ts > now:
            conn.execute("INSERT OR REPLACE INTO hb_meta (key, value) VALUES ('clock', ?)", (ts,))
        self._last_ts = ts
        return ts

    def _table(self, name: bytes) -> TableInfo:
        info = self._tables.get(name)
        if info is None:
            raise TableNotFoundError(name.decode("utf-8", "replace"))
        return info

    def _enabled(self, name: bytes) -> TableInfo:
        info = self._table(name)
        if not info.enabled:
            raise TableNotEnabledError(f"{name.decode('utf-8', 'replace')} is disabled.")
        return info

    def _still(self, info: TableInfo) -> None:
        """Long reads re-check between chunks: the table may have been disabled or dropped."""
        current = self._enabled(info.name)
        if current.id != info.id:
            raise TableNotFoundError(info.name.decode("utf-8", "replace"))

    @staticmethod
    def _check_families(info: TableInfo, families: set[bytes]) -> None:
        missing = families - info.families.keys()
        if missing:
            raise NoSuchColumnFamilyError(
                f"Column families {sorted(m.decode('utf-8', 'replace') for m in missing)} do not exist "
                f"in table {info.name.decode('utf-8', 'replace')}"
            )

    # --- admin -----------------------------------------------------------------------------------

    def table_names(self) -> list[bytes]:
        return sorted(self._tables)

    def describe(self, name: bytes) -> TableInfo:
        return self._table(name)

    def create_table(self, name: bytes, families: Mapping[bytes, FamilyOptions]) -> None:
        if not _TABLE_NAME.match(name) or len(name) > 255:
            raise IllegalArgumentError(f"Illegal table name {name!r}")
        if not families:
            raise IllegalArgumentError("Table should have at least one column family.")
        for family, options in families.items():
            try:
                options.validate(family)
            except ValueError as exc:
                raise IllegalArgumentError(str(exc)) from None
        with self._transaction() as conn:
            if name in self._tables:
                raise TableExistsError(name.decode("utf-8", "replace"))
            created = now_ms()
            cur = conn.execute(
                "INSERT INTO hb_tables (name, enabled, families, created_ms) VALUES (?, 1, ?, ?)",
                (name, dump_families(families), created),
            )
            info = TableInfo(name, int(cur.lastrowid or 0), True, dict(families), created)
            conn.execute(
                f"CREATE TABLE {info.sql} (row BLOB NOT NULL, col BLOB NOT NULL, ts INTEGER NOT NULL,"
                " value BLOB NOT NULL, PRIMARY KEY (row, col, ts DESC)) WITHOUT ROWID"
            )
        self._tables[name] = info
        log.info("table created", extra={"table": name.decode("utf-8", "replace")})

    def delete_table(self, name: bytes) -> None:
        with self._transaction() as conn:
            info = self._table(name)
            if info.enabled:
                raise TableNotDisabledError(name.decode("utf-8", "replace"))
            conn.execute(f"DROP TABLE IF EXISTS {info.sql}")
            conn.execute("DELETE FROM hb_tables WHERE id = ?", (info.id,))
            del self._tables[name]
        self._dirty.discard(name)
        log.info("table deleted", extra={"table": name.decode("utf-8", "replace")})

    def set_enabled(self, name: bytes, enabled: bool) -> None:
        with self._transaction() as conn:
            info = self._table(name)
            if info.enabled == enabled:
                error = TableNotDisabledError if enabled else TableNotEnabledError
                raise error(name.decode("utf-8", "replace"))
            conn.execute("UPDATE hb_tables SET enabled = ? WHERE id = ?", (int(enabled), info.id))
            self._tables[name] = replace(info, enabled=enabled)

    # --- writes ----------------------------------------------------------------------------------

    def mutate(
        self,
        name: bytes,
        batches: Sequence[RowMutations],
        timestamp: int | None = None,
        single_row: bool = False,
    ) -> None:
        """Apply puts and deletes of many rows in one transaction, as HBase's Thrift1 server does.

        ``single_row`` (mutateRow, deleteAll*): the row's Delete, then its Put, each failing
        whole on an unknown family; a failing Put leaves the Delete applied. Otherwise
        (mutateRows): every row's Put as one batch, then, only if all Puts succeeded, every
        row's Delete as one batch. In a batch a row with an unknown family fails alone, the
        others are applied, and the call reports RetriesExhaustedWithDetailsException.
        """
        info = self._enabled(name)
        rows: list[_RowBatch] = []
        # Every family named, gathered while parsing: when all exist (the common case) no row's
        # own families are ever looked at, which kept ~1 µs per cell off big batches.
        delete_families: set[bytes] = set()
        put_families: set[bytes] = set()
        try:
            for row, mutations in batches:
                _check_row(row)
                deletes: list[_Delete] = []
                puts: list[_Put] = []
                for is_delete, column, value in mutations:
                    family, sep, _qualifier = column.partition(b":")
                    if is_delete:
                        deletes.append((family, column if sep else None))
                        delete_families.add(family)
                    elif sep:
                        puts.append((family, column, value or b""))
                        put_families.add(family)
                    else:
                        # HBase's Thrift server logs and skips a put without a qualifier.
                        log.warning("put without qualifier ignored", extra={"column": column.decode("latin-1")})
                rows.append((row, deletes, puts))
        except (AttributeError, TypeError):  # a Mutation without a column
            raise IllegalArgumentError("every mutation needs a column") from None
        if not delete_families and not put_families:
            return
        failure: HBaseError | None = None
        with self._transaction() as conn:
            self._still(info)
            ts = self._clock(conn) if timestamp is None else timestamp
            if single_row:
                for row, deletes, puts in rows:
                    self._check_families(info, {f for f, _c in deletes})
                    self._delete(conn, info, [(row, f, c) for f, c in deletes], ts)
                    try:
                        self._check_families(info, {f for f, _c, _v in puts})
                    except HBaseError as exc:
                        failure = exc  # raised after the commit: the Delete stays applied
                        break
                    self._put(conn, info, [(row, c, ts, v) for _f, c, v in puts])
            else:
                putting, failure = _batch(info, rows, _PUTS, put_families)
                self._put(conn, info, [(row, c, ts, v) for row, _d, puts in putting for _f, c, v in puts])
                if failure is None:
                    deleting, failure = _batch(info, rows, _DELETES, delete_families)
                    self._delete(conn, info, [(row, f, c) for row, deletes, _p in deleting for f, c in deletes], ts)
        self._dirty.add(name)
        if failure is not None:
            raise failure

    @staticmethod
    def _put(conn: sqlite3.Connection, info: TableInfo, puts: list[StoredCell]) -> None:
        if puts:
            conn.executemany(f"INSERT OR REPLACE INTO {info.sql} VALUES (?, ?, ?, ?)", puts)

    @staticmethod
    def _delete(
        conn: sqlite3.Connection, info: TableInfo, deletes: list[tuple[bytes, bytes, bytes | None]], ts: int
    ) -> None:
        columns = [(row, column, ts) for row, _family, column in deletes if column is not None]
        families = [(row, f + b":", family_end(f), ts) for row, f, column in deletes if column is None]
        if columns:
            conn.executemany(f"DELETE FROM {info.sql} WHERE row = ? AND col = ? AND ts <= ?", columns)
        if families:
            conn.executemany(f"DELETE FROM {info.sql} WHERE row = ? AND col >= ? AND col < ? AND ts <= ?", families)

    def delete_all(self, name: bytes, row: bytes, column: bytes | None, timestamp: int | None = None) -> None:
        """deleteAll* calls: one column (``f:q``), one family (``f``) or, with None, the whole row."""
        columns = list(self._table(name).families) if column is None else [column]
        self.mutate(name, [(row, [(True, c, None) for c in columns])], timestamp, single_row=True)

    def _latest(self, conn: sqlite3.Connection, info: TableInfo, row: bytes, column: bytes) -> Cell | None:
        """The newest version, if visible (when it has expired, so have the older ones). Only one
        row is read: a counter collects a version per increment until compaction drops them."""
        policy = VersionPolicy(info.families)
        stored = conn.execute(
            f"SELECT row, col, ts, value FROM {info.sql} WHERE row = ? AND col = ? ORDER BY ts DESC LIMIT 1",
            (row, column),
        ).fetchall()
        visible = policy.select(stored)
        return visible[0] if visible else None

    def read_modify_write(
        self, name: bytes, row: bytes, columns: Sequence[bytes], change: Callable[[bytes, Cell | None], bytes]
    ) -> list[Cell]:
        """atomicIncrement / append: new value of each column from its latest visible cell.

        The new cell gets ``max(now, old timestamp + 1)`` (HBase's ``reckonDelta``) so it always
        supersedes the old one; the write clock moves up with it (see ``_clock``).
        """
        info = self._enabled(name)
        _check_row(row)
        qualified = [c if split_column(c)[1] is not None else c + b":" for c in columns]
        self._check_families(info, {split_column(c)[0] for c in qualified})
        out: list[Cell] = []
        with self._transaction() as conn:
            self._still(info)
            for column in qualified:
                old = self._latest(conn, info, row, column)
                value = change(column, old)
                if old is not None and old[2] == value:  # e.g. counter_get: nothing to write
                    out.append(old)
                    continue
                cell = (column, self._increment_ts(conn, old), value)
                conn.execute(f"INSERT OR REPLACE INTO {info.sql} VALUES (?, ?, ?, ?)", (row, *cell))
                out.append(cell)
        self._dirty.add(name)
        return out

    def _increment_ts(self, conn: sqlite3.Connection, old: Cell | None) -> int:
        """``max(now, old ts + 1)``; the write clock follows unless a client stamped the old
        cell in the future (the clock never jumps to a client's timestamp)."""
        if old is None or old[1] <= max(self._last_ts, now_ms()):
            return self._clock(conn, old[1] + 1 if old else 0)
        return old[1] + 1

    def check_and_mutate(
        self, name: bytes, row: bytes, column: bytes, expected: bytes | None, mutations: Sequence[Mutation]
    ) -> bool:
        """checkAndPut: apply ``mutations`` only if the latest value of ``column`` is ``expected``
        (None: only if the column has no visible value)."""
        info = self._enabled(name)
        _check_row(row)
        self._check_families(info, {split_column(column)[0]})
        with self._transaction() as conn:
            self._still(info)
            latest = self._latest(conn, info, row, column)
            if (latest[2] if latest else None) != expected:
                return False
            ts = self._clock(conn)
            puts = [(row, c, ts, v or b"") for d, c, v in mutations if not d and split_column(c)[1] is not None]
            self._check_families(info, {split_column(c)[0] for _, c, _, _ in puts})
            self._put(conn, info, puts)
        self._dirty.add(name)
        return True

    # --- reads -----------------------------------------------------------------------------------

    def get_rows(
        self,
        name: bytes,
        rows: Sequence[bytes],
        columns: ColumnSelection = ColumnSelection(),  # noqa: B008 - frozen, shared safely
        time_max: int | None = None,
        versions: int = 1,
    ) -> list[tuple[bytes, list[Cell]]]:
        """Point reads, in the order asked; rows with nothing visible are left out."""
        info = self._enabled(name)
        self._check_families(info, columns.referenced_families())
        policy = VersionPolicy(info.families, versions, time_max)
        clause, params = _column_clause(columns)
        sql = f"SELECT row, col, ts, value FROM {info.sql} WHERE row = ?{clause} ORDER BY col, ts DESC"
        out: list[tuple[bytes, list[Cell]]] = []
        with self._reader() as conn:
            for row in rows:
                cells = policy.select(conn.execute(sql, (row, *params)).fetchall())
                if cells:
                    out.append((row, cells))
        return out

    def scan(self, name: bytes, spec: ScanSpec) -> Iterator[tuple[bytes, list[Cell]]]:
        """Rows of a key range with their visible cells, read lazily in growing chunks.

        Checks happen now (missing table or family fail the open, as in HBase), reading later.
        """
        info = self._enabled(name)
        self._check_families(info, spec.columns.referenced_families())
        return self._scan(info, spec)

    def _scan(self, info: TableInfo, spec: ScanSpec) -> Iterator[tuple[bytes, list[Cell]]]:
        policy = VersionPolicy(info.families, spec.versions, spec.time_max)
        clause, col_params = _column_clause(spec.columns)
        order = "row DESC, col DESC, ts ASC" if spec.reverse else "row, col, ts DESC"
        near, far = ("<", ">") if spec.reverse else (">", "<")
        bound: tuple[str, bytes] | None = None  # (operator, key) for the near end
        if spec.start:
            bound = (near + "=", spec.start)
        far_sql, far_params = (f" AND row {far} ?", [spec.stop]) if spec.stop else ("", [])
        chunk = _FIRST_CHUNK
        while True:
            self._still(info)
            near_sql, near_params = (f"row {bound[0]} ?", [bound[1]]) if bound else ("1", [])
            sql = (
                f"SELECT row, col, ts, value FROM {info.sql} WHERE {near_sql}{far_sql}{clause} ORDER BY {order} LIMIT ?"
            )
            with self._reader() as conn:
                stored = conn.execute(sql, (*near_params, *far_params, *col_params, chunk)).fetchall()
                if len(stored) < chunk:
                    break
                last = stored[-1][0]
                cut = len(stored) - 1
                while cut > 0 and stored[cut - 1][0] == last:
                    cut -= 1
                if cut == 0:  # one row wider than the chunk: read that row whole
                    stored = conn.execute(
                        f"SELECT row, col, ts, value FROM {info.sql} WHERE row = ?{clause} ORDER BY {order}",
                        (last, *col_params),
                    ).fetchall()
                    bound = (near, last)
                else:
                    del stored[cut:]
                    bound = (near + "=", last)
            yield from _assemble(policy, stored, spec.reverse)
            chunk = min(chunk * 2, _MAX_CHUNK)
        # The last, short chunk: no SQLite connection is held while the client drains it.
        yield from _assemble(policy, stored, spec.reverse)

    # --- maintenance -----------------------------------------------------------------------------

    def compact(self, name: bytes) -> int:
        """Drop versions beyond max_versions and expired cells; returns how many were dropped.

        Works in key chunks, each its own short transaction, so writers are never held up long.
        """
        info = self._enabled(name)
        policy = VersionPolicy(info.families)
        dropped = 0
        start: bytes | None = None
        while True:
            with self._transaction() as conn:
                self._still(info)
                where, params = ("WHERE row >= ?", (start,)) if start is not None else ("", ())
                keys = conn.execute(
                    f"SELECT row, col, ts FROM {info.sql} {where} ORDER BY row, col, ts DESC LIMIT ?",
                    (*params, _COMPACT_CHUNK),
                ).fetchall()
                done = len(keys) < _COMPACT_CHUNK
                if not done:
                    last = keys[-1][0]
                    keys = [k for k in keys if k[0] != last]
                    if not keys:  # a single huge row: take it whole
                        keys = conn.execute(
                            f"SELECT row, col, ts FROM {info.sql} WHERE row = ? ORDER BY col, ts DESC", (last,)
                        ).fetchall()
                        start = last + b"\x00"
                    else:
                        start = last
                garbage = policy.garbage(keys)
                if garbage:
                    conn.executemany(f"DELETE FROM {info.sql} WHERE row = ? AND col = ? AND ts = ?", garbage)
                dropped += len(garbage)
            if done:
                break
        self._dirty.discard(name)
        if dropped:
            log.info("compacted", extra={"table": name.decode("utf-8", "replace"), "dropped": dropped})
        return dropped

    def compact_dirty(self) -> None:
        """Background maintenance: compact the enabled tables written since their last compaction,
        and every table with a family TTL, whose cells expire with no write at all (HBase's
        periodic major compaction purges them the same way)."""
        expiring = {name for name, info in list(self._tables.items()) if _has_ttl(info)}
        for name in sorted(self._dirty | expiring):
            info = self._tables.get(name)
            if info is None or not info.enabled:
                continue
            with suppress(HBaseError):
                self.compact(name)

    def _checkpoint_loop(self, interval: float = 0.1) -> None:
        """Keep the WAL short without making clients wait for it.

        A PASSIVE checkpoint first copies the bulk of the WAL while the writer keeps committing
        (SQLite releases the GIL meanwhile); a second one under the write lock copies the few
        frames added since, so the checkpoint is complete and the next commit restarts the WAL
        from its beginning instead of growing it.
        """
        wal = self.path.with_name(self.path.name + "-wal")
        conn = self._connect()
        try:
            while not self._stop.wait(interval):
                try:
                    if wal.stat().st_size < _CHECKPOINT_WAL_BYTES:
                        continue
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                    with self._write_lock:
                        if self._closed:
                            break
                        conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                except (OSError, sqlite3.Error) as exc:
                    log.warning("checkpoint failed", extra={"error": str(exc)})
        finally:
            conn.close()

    def checkpoint(self) -> None:
        """Fold the whole WAL into the database file (at shutdown, so the next start is quick)."""
        with self._write_lock:
            self._writer.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def close(self) -> None:
        if self._closed:
            return
        self._stop.set()
        self._checkpointer.join(10)
        with suppress(sqlite3.Error):
            self.checkpoint()
        with self._write_lock:
            self._closed = True
            self._writer.close()
        while True:
            try:
                self._readers.get_nowait().close()
            except queue.Empty:
                break


_Delete = tuple[bytes, bytes | None]
"""``(family, column)`` of a delete; column None deletes the whole family."""
_Put = tuple[bytes, bytes, bytes]
"""``(family, column, value)`` of a put."""
_RowBatch = tuple[bytes, list[_Delete], list[_Put]]
"""``(row, deletes, puts)``: the family comes first in both, so ``_batch`` treats them alike."""
_Part = Literal[1, 2]
"""Index of a part of a ``_RowBatch``: its deletes or its puts."""
_DELETES: Final = 1
_PUTS: Final = 2


def _batch(
    info: TableInfo, rows: Sequence[_RowBatch], part: _Part, named: set[bytes]
) -> tuple[list[_RowBatch], HBaseError | None]:
    """One HBase batch (``Table.put(list)`` / ``Table.delete(list)``) of the rows' ``part``: the
    rows whose families all exist go ahead, each other row fails alone; returns them and the
    client's error. ``named`` holds every family of that part, to skip the per-row check."""
    if named <= info.families.keys():  # the common case
        return [r for r in rows if r[part]], None
    good: list[_RowBatch] = []
    failed: list[str] = []
    for r in rows:
        fams = {item[0] for item in r[part]}
        missing = fams - info.families.keys()
        if missing:
            failed.append(
                f"{NoSuchColumnFamilyError.java_name}: Column families "
                f"{sorted(m.decode('utf-8', 'replace') for m in missing)} do not exist in table "
                f"{info.name.decode('utf-8', 'replace')}"
            )
        elif fams:
            good.append(r)
    if not failed:
        return good, None
    n = len(failed)
    error = RetriesExhaustedError(
        f"Failed {n} action{'s' if n > 1 else ''}: {failed[0]}: {n} time{'s' if n > 1 else ''}, "
        "servers with issues: the embedded gateway"
    )
    return good, error


def _has_ttl(info: TableInfo) -> bool:
    return any(o.time_to_live < FOREVER for o in info.families.values())


def _check_row(row: bytes) -> None:
    if not row:
        raise IllegalArgumentError("Row length is 0")
    if len(row) > MAX_ROW_LENGTH:
        raise IllegalArgumentError(f"Row length {len(row)} is > {MAX_ROW_LENGTH}")


def _column_clause(columns: ColumnSelection) -> tuple[str, list[bytes]]:
    """SQL restricting cells to the selected columns, so unwanted cells never reach Python."""
    if columns.everything:
        return "", []
    terms: list[str] = []
    params: list[bytes] = []
    if columns.columns:
        terms.append(f"col IN ({', '.join('?' * len(columns.columns))})")
        params.extend(sorted(columns.columns))
    for family in sorted(columns.families):
        terms.append("(col >= ? AND col < ?)")
        params.extend((family + b":", family_end(family)))
    return f" AND ({' OR '.join(terms)})", params


def _assemble(policy: VersionPolicy, stored: list[StoredCell], reverse: bool) -> list[tuple[bytes, list[Cell]]]:
    """Rows from whole-row cells in query order; reversed chunks are flipped back to KeyValue
    order inside each row (the policy wants newest first) and rows stay in scan order."""
    if not reverse:
        return policy.rows(stored)
    stored.reverse()
    rows = policy.rows(stored)
    rows.reverse()
    return rows
