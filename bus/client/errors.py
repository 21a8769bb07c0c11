"""The client's exceptions, named after the Java client's so its documentation carries over.

Every failure a caller can see is one of these: a future's exception, a callback's second argument,
or raised from `send`, `poll` and `commit_sync`. Broker error codes become `BrokerResponseError`
carrying the code, and whether a retry may succeed comes from Kafka's own classification.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

__all__ = [
    "AuthenticationError",
    "BrokerResponseError",
    "BufferExhaustedError",
    "CommitFailedError",
    "ConfigError",
    "IllegalStateError",
    "KafkaConnectionError",
    "KafkaError",
    "KafkaTimeoutError",
    "NoOffsetForPartitionError",
    "OffsetOutOfRangeError",
    "ProducerClosedError",
    "RecordTooLargeError",
    "SaslAuthenticationError",
    "SerializationError",
    "SslAuthenticationError",
    "UnsupportedSaslMechanismError",
    "UnsupportedVersionError",
    "broker_error",
]


class KafkaError(Exception):
    """Base of every client error."""

    retriable = False


class KafkaConnectionError(ConnectionError):
    """The broker could not be reached, closed the connection, or sent something unreadable."""


class UnsupportedVersionError(RuntimeError):
    """Neither side serves a common version of the API the client needs."""


class AuthenticationError(KafkaError):
    """The broker refused who we are (Java's AuthenticationException): wrong or missing credentials, a certificate
    it does not trust, or one of ours we do not trust. Not retriable and not a connection error: retrying with the
    same settings fails the same way, so the client reports it at once instead of backing off until a timeout."""


class SaslAuthenticationError(AuthenticationError):
    """The SASL exchange failed; the message is the broker's `error_message` (or the server's proof did not check)."""


class UnsupportedSaslMechanismError(AuthenticationError):
    """The listener does not offer the configured `sasl.mechanism`; the message lists the ones it does."""


class SslAuthenticationError(AuthenticationError):
    """The TLS handshake failed: the broker's certificate is not trusted (or not for this host), or it refused ours."""


class ConfigError(KafkaError, ValueError):
    """A configuration value of the wrong type or out of range, or configs that contradict each other."""


class KafkaTimeoutError(KafkaError, TimeoutError):
    """An operation did not finish in its time budget (max.block.ms, delivery.timeout.ms, api timeouts)."""

    retriable = True


class BufferExhaustedError(KafkaTimeoutError):
    """No room in buffer.memory for a new batch within max.block.ms (the Java BufferExhaustedException)."""


class RecordTooLargeError(KafkaError):
    """A record larger than max.request.size or buffer.memory, or one the broker refuses on its own."""


class SerializationError(KafkaError):
    """A key or value serializer (or deserializer) failed, or gave something that is not bytes."""


class ProducerClosedError(KafkaError):
    """The producer was closed before the record could be sent (close with a short timeout)."""


class IllegalStateError(KafkaError):
    """A call that is not valid now, e.g. poll() with neither a subscription nor an assignment."""


class CommitFailedError(KafkaError):
    """The group rebalanced before the commit landed: the partitions may already belong to another member."""


class OffsetOutOfRangeError(KafkaError):
    """A fetch position outside the log and auto.offset.reset=none."""


class NoOffsetForPartitionError(KafkaError):
    """No committed offset and auto.offset.reset=none."""


class BrokerResponseError(KafkaError):
    """A broker answered with an error code; `retriable` follows Kafka's RetriableException classification."""

    def __init__(self, code: ErrorCode | int, message: str | None = None) -> None:
        self.code = code if isinstance(code, ErrorCode) else ErrorCode(int(code))
        self.retriable = bool(self.code.retriable)
        text = self.code.name.upper()
        super().__init__(f"{text}: {message}" if message else text)


def broker_error(code: ErrorCode | int, message: str | None = None) -> BrokerResponseError:
    return BrokerResponseError(code, message)
