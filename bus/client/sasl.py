"""The client's side of a SASL login (KIP-43, KIP-152): SaslHandshake v1, then SaslAuthenticate requests carrying
the mechanism's tokens, as Kafka's `SaslClientAuthenticator` sends them after ApiVersions.

PLAIN sends one token (`\\0user\\0password`); SCRAM-SHA-256/512 send the client-first and client-final messages
and check the server's final signature (`bus.security.scram_client`), so a server that does not hold our
credential is refused too. The exchange is written against a `Exchange` callable (send one request, wait for
its answer) so that `connection.py` owns the socket and the tests can drive it against the sans-IO SASL servers.

A refusal raises `SaslAuthenticationError` with the broker's `error_message` (Kafka's text: "Authentication
failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512"), or
`UnsupportedSaslMechanismError` listing what the listener offers. Messages never hold the password.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from bus.client.errors import SaslAuthenticationError, UnsupportedSaslMechanismError
from bus.client.security import PLAIN, SaslCredentials
from bus.protocol.messages import request_shapes
from bus.security.scram_client import ScramClient, ScramClientError

SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36
HANDSHAKE_VERSIONS = range(1, 2)  # v0 is followed by bare tokens, which only old clients send

Exchange = Callable[[Any, int], Any]  # (request, version) -> response
VersionFor = Callable[[int, range | None], int]  # (api key, wanted versions) -> the version to use


class _Mechanism(Protocol):
    def first(self) -> bytes:
        """The client's first token."""

    def answer(self, challenge: bytes) -> bytes | None:
        """The next token for the server's `challenge`, or None once the exchange is complete."""


class _Plain:
    """RFC 4616: one token, no authorization id (the broker then takes the user name), as Kafka's client sends."""

    def __init__(self, credentials: SaslCredentials) -> None:
        self._credentials = credentials

    def first(self) -> bytes:
        return f"\0{self._credentials.username}\0{self._credentials.password}".encode()

    def answer(self, challenge: bytes) -> bytes | None:
        return None


class _Scram:
    """client-first, client-final for the server-first, then the server-final's signature checked."""

    def __init__(self, credentials: SaslCredentials) -> None:
        self._client = ScramClient(credentials.mechanism, credentials.username, credentials.password)
        self._final_sent = False

    def first(self) -> bytes:
        return self._client.first_message()

    def answer(self, challenge: bytes) -> bytes | None:
        if not self._final_sent:
            self._final_sent = True
            return self._client.final_message(challenge)
        self._client.verify(challenge)
        return None


def authenticate(exchange: Exchange, version_for: VersionFor, credentials: SaslCredentials) -> int:
    """Log in with `credentials`; returns the session lifetime in ms the broker granted (0: no limit, KIP-368)."""
    _handshake(exchange, version_for, credentials.mechanism)
    version = version_for(SASL_AUTHENTICATE, None)
    shapes = request_shapes(SASL_AUTHENTICATE, version)
    mechanism: _Mechanism = _Plain(credentials) if credentials.mechanism == PLAIN else _Scram(credentials)
    token: bytes | None = mechanism.first()
    while token is not None:
        response = exchange(shapes.make("SaslAuthenticateRequest", auth_bytes=token), version)
        if response.error_code != ErrorCode.none:
            raise SaslAuthenticationError(response.error_message or
                                          f"SASL authentication failed ({response.error_code.name.upper()})")
        try:
            token = mechanism.answer(response.auth_bytes)
        except ScramClientError as exc:
            raise SaslAuthenticationError(str(exc)) from None
    lifetime = getattr(response, "session_lifetime", None)  # v1+
    return 0 if lifetime is None else max(0, int(lifetime.total_seconds() * 1000))


def _handshake(exchange: Exchange, version_for: VersionFor, mechanism: str) -> None:
    version = version_for(SASL_HANDSHAKE, HANDSHAKE_VERSIONS)
    response = exchange(request_shapes(SASL_HANDSHAKE, version).make("SaslHandshakeRequest", mechanism=mechanism),
                        version)
    code = response.error_code
    if code == ErrorCode.none:
        return
    enabled = "[" + ", ".join(response.mechanisms) + "]"
    if code == ErrorCode.unsupported_sasl_mechanism:
        raise UnsupportedSaslMechanismError(f"Client SASL mechanism '{mechanism}' not enabled in the server, enabled "
                                            f"mechanisms are {enabled}")
    if code == ErrorCode.illegal_sasl_state:
        raise SaslAuthenticationError(f"Unexpected handshake request with client mechanism {mechanism}: the listener "
                                      "does not authenticate with SASL (check security.protocol)")
    raise SaslAuthenticationError(f"Unknown error code {code.name.upper()}, client mechanism is {mechanism}, enabled "
                                  f"mechanisms are {enabled}")
