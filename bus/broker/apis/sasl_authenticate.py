"""SaslAuthenticate (36): one token of the connection's SASL exchange, after a v1 SaslHandshake.

The exchange (`ctx.sasl`, `bus.security.authenticator`) evaluates it: the answer carries the server's next token, or
on success the last one and, from v1, `session_lifetime_ms` (`connections.max.reauth.ms`; 0: no limit, KIP-368). A
failed login is SASL_AUTHENTICATION_FAILED with Kafka's message, answered after
`connection.failed.authentication.delay.ms`, and the connection closes. Outside an exchange (an authenticated
connection, or a listener without SASL) it is ILLEGAL_SASL_STATE with Kafka's message, and the connection stays.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.context import RequestContext
from bus.security.authenticator import delayed_if_failed

API_KEY = 36
MIN_VERSION = 0
MAX_VERSION = 2


def handle(ctx: RequestContext, request: Any) -> Any:
    sasl = ctx.sasl
    if sasl is None or not sasl.in_exchange():
        return ctx.make("SaslAuthenticateResponse", error_code=ErrorCode.illegal_sasl_state,
                        error_message="SaslAuthenticate request received after successful authentication",
                        auth_bytes=b"")
    result = sasl.authenticate(request.auth_bytes)
    response = ctx.make("SaslAuthenticateResponse", error_code=result.error_code, error_message=result.error_message,
                        auth_bytes=result.auth_bytes, session_lifetime=result.session_lifetime_ms)
    return delayed_if_failed(sasl, response)
