"""SaslHandshake (17): the client names its SASL mechanism; the answer lists the listener's enabled ones.

On a SASL listener the connection's exchange (`ctx.sasl`, `bus.security.authenticator`) starts with it: v1 is
followed by SaslAuthenticate requests, v0 (still served by Kafka 4.0) by bare tokens. A mechanism the listener does
not offer is UNSUPPORTED_SASL_MECHANISM, answered after the failed-authentication delay, and the connection closes.
On an authenticated connection whose session has a lifetime (`connections.max.reauth.ms`) it starts a
re-authentication (KIP-368). Anywhere else (a PLAINTEXT or SSL listener, or a session without a lifetime) it is
ILLEGAL_SASL_STATE, as Kafka's KafkaApis answers it, and the connection stays.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.context import RequestContext
from bus.security.authenticator import delayed_if_failed

API_KEY = 17
MIN_VERSION = 0
MAX_VERSION = 1


def handle(ctx: RequestContext, request: Any) -> Any:
    sasl = ctx.sasl
    if sasl is None or not sasl.accepts_handshake():
        return ctx.make("SaslHandshakeResponse", error_code=ErrorCode.illegal_sasl_state, mechanisms=())
    error = sasl.handshake(request.mechanism, ctx.api_version)
    response = ctx.make("SaslHandshakeResponse", error_code=error, mechanisms=sasl.listener.mechanisms)
    return delayed_if_failed(sasl, response)
