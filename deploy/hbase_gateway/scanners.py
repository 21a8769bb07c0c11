"""Open scanners: the result pipeline of one scan, and their ids and leases.

Thrift1 scanners are server-side state addressed by an i32 id, usable from any connection, and
a client that walks away leaves them behind; leases (HBase's scanner timeout, 60 s by default)
reclaim them. A lease expires only after being idle that long; every call renews it.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from .cells import Cell
from .errors import HBaseError, ScannerExpiredError, UnknownScannerError
from .filters import Filter, run
from .limits import too_many_scanners

Row = tuple[bytes, list[Cell]]


def scan_results(rows: Iterator[Row], flt: Filter | None, batch: int | None = None) -> Iterator[Row]:
    """What a scanner hands out: filtered rows (``filters.run``), rows cut into pieces of
    ``batch`` cells (HBase's Scan.setBatch, happybase's ``scan_batching``)."""
    if flt is not None:
        rows = run(flt, rows)
    if not batch:
        return rows  # the common full scan: no per-row step at all
    return _batched(rows, batch)


def _batched(rows: Iterator[Row], batch: int) -> Iterator[Row]:
    for row, cells in rows:
        for i in range(0, len(cells), batch):
            yield row, cells[i : i + batch]


@dataclass
class Scanner:
    results: Iterator[Row]
    table: bytes
    sorted_columns: bool = False
    error: HBaseError | None = None  # reported at the first get (see handler.scannerOpenWithScan)
    last_used: float = field(default_factory=time.monotonic)
    lock: threading.Lock = field(default_factory=threading.Lock)
    done: bool = False
    owner: int | None = None  # the connection that opened it (limits.current_connection)


class ScannerRegistry:
    """Scanner ids -> scanners, with idle leases swept lazily on each call.

    Each connection may have at most ``max_per_owner`` scanners open at once (counted from the
    scanners it opened that are neither closed nor expired): a client that opens scanners in a
    loop and never closes them is refused, not allowed to fill the memory until leases expire.
    A scanner stays usable from any connection, as in HBase.
    """

    def __init__(
        self, lease_seconds: float = 60.0, remember_expired: int = 10000, max_per_owner: int | None = None
    ) -> None:
        self.lease_seconds = lease_seconds
        self.max_per_owner = max_per_owner
        self._scanners: dict[int, Scanner] = {}
        self._per_owner: dict[int, int] = {}
        self._expired: dict[int, None] = {}  # insertion-ordered, bounded: for a clearer error
        self._remember_expired = remember_expired
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._last_sweep = time.monotonic()

    def __len__(self) -> int:
        return len(self._scanners)

    def open(self, scanner: Scanner) -> int:
        self._sweep()
        with self._lock:
            owner = scanner.owner
            if owner is not None:
                held = self._per_owner.get(owner, 0)
                if self.max_per_owner is not None and held >= self.max_per_owner:
                    raise too_many_scanners(self.max_per_owner)
                self._per_owner[owner] = held + 1
            sid = next(self._ids)
            if sid > 0x7FFFFFFF:  # i32 ids: start over (ids that old are long gone)
                self._ids = itertools.count(2)
                sid = 1
            self._scanners[sid] = scanner
        return sid

    def _lookup(self, sid: int) -> Scanner:
        self._sweep()
        with self._lock:
            scanner = self._scanners.get(sid)
            if scanner is None:
                if sid in self._expired:
                    raise ScannerExpiredError(f"scanner {sid} lease expired after {self.lease_seconds:g} s idle")
                raise UnknownScannerError("scanner ID is invalid")
            scanner.last_used = time.monotonic()
            return scanner

    def next_rows(self, sid: int, count: int) -> tuple[list[Row], Scanner]:
        scanner = self._lookup(sid)
        with scanner.lock:
            if scanner.error is not None:
                raise scanner.error
            if scanner.done or count < 1:
                return [], scanner
            rows = list(itertools.islice(scanner.results, count))
            if len(rows) < count:
                scanner.done = True
            scanner.last_used = time.monotonic()
            return rows, scanner

    def close(self, sid: int) -> None:
        self._lookup(sid)
        with self._lock:
            self._forget(self._scanners.pop(sid, None))

    def _forget(self, scanner: Scanner | None) -> None:
        """Under ``_lock``: a scanner left the registry; its owner may open another."""
        if scanner is None or scanner.owner is None:
            return
        held = self._per_owner.get(scanner.owner, 0) - 1
        if held > 0:
            self._per_owner[scanner.owner] = held
        else:
            self._per_owner.pop(scanner.owner, None)

    def _sweep(self) -> None:
        """Expire idle scanners; at most once a second, so the per-call cost stays tiny."""
        now = time.monotonic()
        if now - self._last_sweep < min(1.0, self.lease_seconds / 4):
            return
        with self._lock:
            self._last_sweep = now
            for sid in [s for s, sc in self._scanners.items() if now - sc.last_used > self.lease_seconds]:
                self._forget(self._scanners.pop(sid))
                self._expired[sid] = None
            while len(self._expired) > self._remember_expired:
                del self._expired[next(iter(self._expired))]
