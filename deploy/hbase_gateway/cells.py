"""HBase's cell model: columns, family options and which stored versions a read may see.

Kept free of I/O because the same rules serve every read path (getRow, getVer, scans) and
compaction; if they lived inside the store they would be copied once per query shape.

A cell is ``(column, timestamp_ms, value)`` with ``column`` the full ``b"family:qualifier"``.
Stored cells of one row arrive ordered by column ascending, timestamp descending: HBase's own
KeyValue order, so "newest first" is simply "first seen".

Version rules follow HBase's NEW_VERSION_BEHAVIOR (HBASE-15968), the deterministic variant:
versions are counted from the newest stored one whatever the read's time range, so a version
beyond ``max_versions`` never resurfaces, with or without a compaction having run. Expired cells
(TTL) are never visible.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass

Cell = tuple[bytes, int, bytes]
"""``(column, timestamp_ms, value)``."""

StoredCell = tuple[bytes, bytes, int, bytes]
"""``(row, column, timestamp_ms, value)``: one SQL row of the store."""

FAMILY_SEPARATOR = b":"
# Java's Integer.MAX_VALUE: what HBase reports as the TTL of a family that never expires.
FOREVER = 2**31 - 1
# HBase rejects more than this in a Thrift i64 timestamp only by overflow; reads use it as "no bound".
LATEST_TIMESTAMP = 2**63 - 1

COMPRESSIONS = frozenset({"NONE", "GZ", "LZO", "SNAPPY", "LZ4", "BZIP2", "ZSTD", "LZMA"})
BLOOM_TYPES = frozenset({"NONE", "ROW", "ROWCOL", "ROWPREFIX_FIXED_LENGTH"})


def split_column(column: bytes) -> tuple[bytes, bytes | None]:
    """HBase's ``CellUtil.parseColumn``: ``f`` -> (f, None), ``f:`` -> (f, b""), ``f:q`` -> (f, q).

    ``None`` as qualifier means "the whole family", which is how Thrift1 callers ask for a
    family delete or a family-wide read.
    """
    family, sep, qualifier = column.partition(FAMILY_SEPARATOR)
    return (family, qualifier) if sep else (family, None)


def family_end(family: bytes) -> bytes:
    """Smallest column key after every ``family:...`` key, for half-open SQL range bounds."""
    return family + b";"  # ';' is ':' + 1


def bytes_increment(prefix: bytes) -> bytes | None:
    """Smallest key greater than every key starting with ``prefix`` (None: no upper bound)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class FamilyOptions:
    """The ColumnDescriptor options HBase keeps per family; only the first two change reads."""

    max_versions: int = 3
    time_to_live: int = FOREVER  # seconds
    compression: str = "NONE"
    in_memory: bool = False
    bloom_filter_type: str = "NONE"
    bloom_filter_vector_size: int = 0
    bloom_filter_nb_hashes: int = 0
    block_cache_enabled: bool = False

    def validate(self, family: bytes) -> None:
        """Reject what HBase's ``HColumnDescriptor`` setters reject (IllegalArgumentException)."""
        if not family or FAMILY_SEPARATOR in family:
            raise ValueError(f"invalid column family name {family!r}")
        if self.max_versions < 1:
            raise ValueError(f"maxVersions must be >= 1 for family {family!r}")
        if self.time_to_live < 1:
            raise ValueError(f"timeToLive must be positive (or -1 for forever) for family {family!r}")
        if self.compression not in COMPRESSIONS:
            raise ValueError(f"unknown compression {self.compression!r}")
        if self.bloom_filter_type not in BLOOM_TYPES:
            raise ValueError(f"unknown bloom filter type {self.bloom_filter_type!r}")

    def to_json(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> FamilyOptions:
        return cls(**data)  # type: ignore[arg-type]


def dump_families(families: Mapping[bytes, FamilyOptions]) -> str:
    """Schema as JSON text; family names are bytes, stored latin-1 so any byte round-trips."""
    return json.dumps({name.decode("latin-1"): opts.to_json() for name, opts in families.items()})


def load_families(text: str) -> dict[bytes, FamilyOptions]:
    return {name.encode("latin-1"): FamilyOptions.from_json(o) for name, o in json.loads(text).items()}


@dataclass(frozen=True, slots=True)
class ColumnSelection:
    """Which columns a read asks for: exact columns plus whole families; empty means everything."""

    columns: frozenset[bytes] = frozenset()
    families: frozenset[bytes] = frozenset()

    @classmethod
    def parse(cls, requested: Iterable[bytes] | None) -> ColumnSelection:
        columns: set[bytes] = set()
        families: set[bytes] = set()
        for column in requested or ():
            family, qualifier = split_column(column)
            if qualifier is None:
                families.add(family)
            else:
                columns.add(column)
        # A family asked for whole makes its single columns redundant (HBase: addFamily wins).
        columns = {c for c in columns if split_column(c)[0] not in families}
        return cls(frozenset(columns), frozenset(families))

    @property
    def everything(self) -> bool:
        return not self.columns and not self.families

    def referenced_families(self) -> set[bytes]:
        return set(self.families) | {split_column(c)[0] for c in self.columns}


class VersionPolicy:
    """Chooses the visible versions of each column for one read, from cells in store order.

    Built once per read (it captures "now" for TTL) and applied to many rows, so the per-family
    limits are precomputed and the common case (latest version, no TTL, no time bound) takes a
    loop that does one comparison per cell.
    """

    __slots__ = ("_limits", "_simple", "_time_max", "_versions")

    def __init__(
        self,
        families: Mapping[bytes, FamilyOptions],
        versions: int = 1,
        time_max: int | None = None,
        at_ms: int | None = None,
    ) -> None:
        at = now_ms() if at_ms is None else at_ms
        self._versions = max(1, versions)
        self._time_max = LATEST_TIMESTAMP if time_max is None else time_max
        # family -> (max versions, oldest timestamp still alive)
        self._limits = {
            name: (o.max_versions, -1 if o.time_to_live >= FOREVER else at - o.time_to_live * 1000)
            for name, o in families.items()
        }
        self._simple = self._versions == 1 and time_max is None and all(cut < 0 for _, cut in self._limits.values())

    def rows(self, stored: Sequence[StoredCell]) -> list[tuple[bytes, list[Cell]]]:
        """Group stored cells (row, col asc, ts desc) into rows of visible cells; drop empty rows."""
        out: list[tuple[bytes, list[Cell]]] = []
        current_row: bytes | None = None
        cells: list[Cell] = []
        previous: bytes | None = None
        if self._simple:
            for row, column, ts, value in stored:
                if row != current_row:
                    current_row, cells, previous = row, [], None
                    out.append((row, cells))
                if column != previous:
                    previous = column
                    cells.append((column, ts, value))
            return out
        for row, group in _group_by_row(stored):
            visible = self.select(group)
            if visible:
                out.append((row, visible))
        return out

    def select(self, stored: Iterable[StoredCell]) -> list[Cell]:
        """Visible cells of one row, still in column / newest-first order."""
        versions, time_max, limits = self._versions, self._time_max, self._limits
        out: list[Cell] = []
        previous: bytes | None = None
        seen = taken = max_versions = 0
        cutoff = -1
        for _row, column, ts, value in stored:
            if column != previous:
                previous, seen, taken = column, 0, 0
                max_versions, cutoff = limits.get(split_column(column)[0], (0, -1))
            seen += 1
            if seen > max_versions or ts < cutoff or ts >= time_max or taken >= versions:
                continue
            taken += 1
            out.append((column, ts, value))
        return out

    def garbage(self, keys: Iterable[tuple[bytes, bytes, int]]) -> list[tuple[bytes, bytes, int]]:
        """Of ``(row, column, ts)`` keys in store order, those no read can ever see again.

        That is versions beyond ``max_versions`` and expired cells: what compaction deletes.
        """
        limits = self._limits
        out: list[tuple[bytes, bytes, int]] = []
        previous: tuple[bytes, bytes] | None = None
        seen = max_versions = 0
        cutoff = -1
        for key in keys:
            row, column, ts = key
            if (row, column) != previous:
                previous, seen = (row, column), 0
                max_versions, cutoff = limits.get(split_column(column)[0], (0, -1))
            seen += 1
            if seen > max_versions or ts < cutoff:
                out.append(key)
        return out


def _group_by_row(stored: Sequence[StoredCell]) -> Iterable[tuple[bytes, Sequence[StoredCell]]]:
    start = 0
    for i in range(1, len(stored) + 1):
        if i == len(stored) or stored[i][0] != stored[start][0]:
            yield stored[start][0], stored[start:i]
            start = i
