"""Small pieces the group-coordination handlers share (JoinGroup, SyncGroup, Heartbeat, ...)."""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Callable
from typing import Any, TypeVar

from bus.broker.context import RequestContext

T = TypeVar("T")
_MS = datetime.timedelta(milliseconds=1)


def millis(value: datetime.timedelta | int) -> int:
    """kio hands timeouts over as timedeltas; the coordinator works in whole milliseconds."""
    return value // _MS if isinstance(value, datetime.timedelta) else int(value)


def client_host(ctx: RequestContext) -> str:
    """Kafka reports a member's host as Java's InetAddress.toString() does: "/127.0.0.1"."""
    host = ctx.peer.rsplit(":", 1)[0] if ":" in ctx.peer else ctx.peer
    return "/" + host.strip("[]")


def respond_with(future: asyncio.Future[T], build: Callable[[T], Any]) -> Any:
    """The response now if the coordinator answered at once, else an awaitable of it (a parked join/sync)."""
    if future.done():
        return build(future.result())

    async def later() -> Any:
        return build(await future)

    return later()
