"""What the transaction handlers share: the fencing error code each request version understands, and answering
a coordinator call whose write may still wait for its partition's followers."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from bus.protocol.errors import KafkaApiError


def fenced_code(api_version: int, first_version_with_producer_fenced: int) -> ErrorCode:
    """PRODUCER_FENCED is only understood by newer request versions (KIP-588); older ones get INVALID_PRODUCER_EPOCH."""
    if api_version >= first_version_with_producer_fenced:
        return ErrorCode.producer_fenced
    return ErrorCode.invalid_producer_epoch


def answer(call: Callable[[], Any], build: Callable[[Any, ErrorCode], Any]) -> Any:
    """`build(result, error)` for what the coordinator `call` returns: the response now, or (its write waits for
    followers: the call returned an awaitable) an awaitable of it. A KafkaApiError, raised at once or once the
    write is settled, is answered with its code and a None result."""
    try:
        result = call()
    except KafkaApiError as exc:
        return build(None, exc.code)
    if not inspect.isawaitable(result):
        return build(result, ErrorCode.none)

    async def later() -> Any:
        try:
            value = await result
        except KafkaApiError as exc:
            return build(None, exc.code)
        return build(value, ErrorCode.none)

    return later()
