"""What one client may ask of the gateway, and which connection is asking.

A Thrift1 request is decoded whole before it is served, so each bound here is checked on the
decoded request and answered with the IDL's ``IllegalArgument`` (or ``IOError`` where the method
declares nothing else), naming the command-line flag that sets it: the connection stays open and
the other clients never notice. Connection-level bounds (how many, how long idle, and a request
so large that reading it whole would cost the memory the limits protect) live in
``server.GatewayServer``, which closes only the connection concerned.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass

from .errors import HBaseError, IllegalArgumentError

MiB = 1 << 20


@dataclass(frozen=True)
class Limits:
    max_rows_per_call: int = 10_000
    """Rows of one scannerGetList, getRows*, mutateRows* and a TScan's ``caching``."""
    max_mutate_bytes: int = 64 * MiB
    """Row keys, columns and values of one mutateRow*/mutateRows* call, added up."""
    max_scanners_per_connection: int = 1_000
    """Scanners a connection has open (opened by it, neither closed nor expired)."""
    max_connections: int = 512
    """Client connections at once; the next one is closed as soon as it is accepted."""
    idle_timeout_seconds: float = 0.0
    """A connection that sends nothing for this long is closed (0: never)."""

    @property
    def max_request_bytes(self) -> int:
        """Past this a request is not even read to its end: its connection is closed. Twice the
        mutation limit (and 1 MiB more), so any call near that limit is still read whole and
        answered with the error naming it."""
        return 2 * self.max_mutate_bytes + MiB


def too_many_rows(what: str, count: int, limit: int) -> IllegalArgumentError:
    return IllegalArgumentError(
        f"{what} asks for {count:,} rows, over the gateway's limit of {limit:,} rows per call "
        "(--max-rows-per-call); ask in smaller pieces"
    )


def too_many_bytes(count: int, limit: int) -> IllegalArgumentError:
    return IllegalArgumentError(
        f"mutation batch of {count:,} bytes is over the gateway's limit of {limit:,} bytes per call "
        "(--max-mutate-bytes); send it in smaller batches"
    )


def too_many_scanners(limit: int) -> HBaseError:
    return HBaseError(
        f"this connection already has {limit:,} open scanners, the gateway's limit "
        "(--max-scanners-per-connection); close scanners before opening more"
    )


_ids = itertools.count(1)
_local = threading.local()


def enter_connection() -> int:
    """Called by the thread that serves a new connection: its id, for per-connection bounds."""
    _local.connection = next(_ids)
    return int(_local.connection)


def current_connection() -> int | None:
    """The connection the calling thread serves (None outside a connection, e.g. in-process tests)."""
    return getattr(_local, "connection", None)
