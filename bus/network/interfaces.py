"""What the network layer needs of the layer above it, as interfaces: the network never imports the broker.

The broker hands its request handlers (`bus.broker.kafka_apis.KafkaApis`, one table per listener) to the socket
server, and to the controller channel for the requests an Envelope carries; both see them only as this.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING, Protocol

from bus.security.acls import ANONYMOUS

if TYPE_CHECKING:
    from bus.security.authenticator import SaslAuthenticator


class RequestHandler(Protocol):
    """Answers the request frames of a connection, in the order they came."""

    def handle(
        self, frame: bytes, listener: str, peer: str, *, principal: str = ANONYMOUS, client_host: str | None = None,
        sasl: SaslAuthenticator | None = None,
    ) -> bytes | memoryview | Awaitable[bytes | memoryview | None] | None:
        """The response to one request frame (without its size prefix) from `peer` ("host:port") on `listener`:
        bytes, an awaitable of them when the answer must wait, or None when the request gets no response;
        `bus.network.errors.InvalidRequest` closes the connection."""
