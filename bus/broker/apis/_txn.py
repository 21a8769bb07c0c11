"""What the transaction handlers share: the fencing error code each request version understands."""

from __future__ import annotations

from kio.schema.errors import ErrorCode


def fenced_code(api_version: int, first_version_with_producer_fenced: int) -> ErrorCode:
    """PRODUCER_FENCED is only understood by newer request versions (KIP-588); older ones get INVALID_PRODUCER_EPOCH."""
    if api_version >= first_version_with_producer_fenced:
        return ErrorCode.producer_fenced
    return ErrorCode.invalid_producer_epoch
