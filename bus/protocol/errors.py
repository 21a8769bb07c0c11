"""The one shape every request-level failure takes: a Kafka error code plus the message clients show."""

from __future__ import annotations

from kio.schema.errors import ErrorCode


class KafkaApiError(Exception):
    """Raised deep in broker logic, turned into a response's `error_code` / `error_message` by a handler."""

    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message or code.name)
        self.code = code
        self.message = message
