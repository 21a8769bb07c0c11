"""The client's side of a SASL login (KIP-43, KIP-152), sans-IO: SaslHandshake v1, then SaslAuthenticate requests
carrying the mechanism's tokens, as Kafka's `SaslClientAuthenticator` sends them after ApiVersions.

`login` is a generator: it yields each request to send (with its version) and is sent each response back, and
returns the session lifetime the broker granted. Whoever owns the socket drives it: the native client's blocking
connection (`bus.client.sasl`) and a broker's asyncio connections to the other nodes of its cluster
(`bus.network.network_client`), which log in with the broker's own credentials, as Kafka's inter-broker clients do.

PLAIN sends one token (`\\0user\\0password`); SCRAM-SHA-256/512 send the client-first and client-final messages
and check the server's final signature (`bus.security.scram_client`), so a server that does not hold our
credential is refused too. A refusal raises `SaslLoginError` with the broker's `error_message` (Kafka's text:
"Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512"), or
`UnsupportedMechanismError` listing what the listener offers. Messages never hold the password.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from bus.protocol.messages import request_shapes
from bus.security.sasl import PLAIN
from bus.security.scram_client import ScramClient, ScramClientError

SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36
HANDSHAKE_VERSIONS = range(1, 2)  # v0 is followed by bare tokens, which only old clients send

VersionFor = Callable[[int, range | None], int]  # (api key, wanted versions) -> the version to use
Login = Generator[tuple[Any, int], Any, int]  # yields (request, version), is sent the response, returns ms


@dataclass(frozen=True, slots=True)
class SaslCredentials:
    """Who the client logs in as, and with which mechanism (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)."""

    mechanism: str
    username: str
    password: str = field(repr=False)


class SaslLoginError(Exception):
    """The broker refused the login, or its answers do not prove it holds our credential."""


class UnsupportedMechanismError(SaslLoginError):
    """The listener does not offer the mechanism."""


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


def login(credentials: SaslCredentials, version_for: VersionFor) -> Login:
    """Log in with `credentials`; returns the session lifetime in ms the broker granted (0: no limit, KIP-368)."""
    yield from _handshake(version_for, credentials.mechanism)
    version = version_for(SASL_AUTHENTICATE, None)
    shapes = request_shapes(SASL_AUTHENTICATE, version)
    mechanism: _Mechanism = _Plain(credentials) if credentials.mechanism == PLAIN else _Scram(credentials)
    token: bytes | None = mechanism.first()
    while token is not None:
        response = yield shapes.make("SaslAuthenticateRequest", auth_bytes=token), version
        if response.error_code != ErrorCode.none:
            raise SaslLoginError(response.error_message or
                                 f"SASL authentication failed ({response.error_code.name.upper()})")
        try:
            token = mechanism.answer(response.auth_bytes)
        except ScramClientError as exc:
            raise SaslLoginError(str(exc)) from None
    lifetime = getattr(response, "session_lifetime", None)  # v1+
    return 0 if lifetime is None else max(0, int(lifetime.total_seconds() * 1000))


def _handshake(version_for: VersionFor, mechanism: str) -> Generator[tuple[Any, int], Any, None]:
    version = version_for(SASL_HANDSHAKE, HANDSHAKE_VERSIONS)
    response = yield request_shapes(SASL_HANDSHAKE, version).make("SaslHandshakeRequest", mechanism=mechanism), version
    code = response.error_code
    if code == ErrorCode.none:
        return
    enabled = "[" + ", ".join(response.mechanisms) + "]"
    if code == ErrorCode.unsupported_sasl_mechanism:
        raise UnsupportedMechanismError(f"Client SASL mechanism '{mechanism}' not enabled in the server, enabled "
                                        f"mechanisms are {enabled}")
    if code == ErrorCode.illegal_sasl_state:
        raise SaslLoginError(f"Unexpected handshake request with client mechanism {mechanism}: the listener does not "
                             "authenticate with SASL (check security.protocol)")
    raise SaslLoginError(f"Unknown error code {code.name.upper()}, client mechanism is {mechanism}, enabled "
                         f"mechanisms are {enabled}")


def drive(steps: Login, exchange: Callable[[Any, int], Any]) -> int:
    """Run a login over a blocking `exchange` (send one request, return its response)."""
    try:
        request = next(steps)
        while True:
            request = steps.send(exchange(*request))
    except StopIteration as done:
        return int(done.value)
