"""One SASL connection's authentication (Kafka's SaslServerAuthenticator), without the socket.

A SASL listener answers a new connection's ApiVersions and SaslHandshake, then only the SaslAuthenticate
requests that carry the mechanism's tokens, until the client has authenticated; the connection (`connection.py`)
refuses anything else by closing, and hands these requests to KafkaApis, whose `sasl_handshake` and
`sasl_authenticate` handlers drive this object. A v0 handshake, which Kafka 4.0 still serves (KIP-896 kept it),
is followed by bare size-prefixed tokens instead of SaslAuthenticate requests (`raw`, `evaluate_raw`).

The outcome goes back to the connection through `ConnectionEvents`: authenticated (the principal, and how long
the session may last: `connections.max.reauth.ms`, KIP-368), re-authenticating (a SaslHandshake on an authenticated
connection whose session has a lifetime: only the re-authentication's requests are answered until it ends), or
failed (the answer leaves after `connection.failed.authentication.delay.ms`, then the connection closes).

A failure is logged with the peer, the listener, the mechanism and the user the client claimed (read from its first
token), never a password, and counted per listener and mechanism like every success (`AuthenticationMetrics`).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from kio.schema.errors import ErrorCode

from bus.security.sasl import PLAIN, Authenticated, Challenge, Failed, SaslOutcome, SaslServer
from bus.security.sasl_config import SaslListener
from bus.security.scram import ScramError, username_from_sasl_name
from bus.security.scram_messages import ClientFirst, ScramMessageError

log = logging.getLogger(__name__)

SASL_HANDSHAKE = 17
API_VERSIONS = 18
SASL_AUTHENTICATE = 36
UNSUPPORTED = "unsupported"  # the mechanism a refused SaslHandshake asked for, as logged and counted

_T = TypeVar("_T")


class Phase(enum.Enum):
    HANDSHAKE = "handshake"  # ApiVersions or SaslHandshake
    AUTHENTICATE = "authenticate"  # SaslAuthenticate requests carry the tokens (handshake v1)
    RAW = "raw"  # bare size-prefixed tokens (handshake v0)
    COMPLETE = "complete"
    FAILED = "failed"


class AuthenticationRecorder(Protocol):
    """Where outcomes are counted (the network's `AuthenticationMetrics`): given here as an interface, so this layer
    does not import the network that drives it."""

    def record(self, outcome: str, listener: str, mechanism: str) -> None: ...


class ConnectionEvents(Protocol):
    """What the connection does when the authentication moves on."""

    def authenticated(self, principal: str, session_lifetime_s: float) -> None:
        """The client is `principal` (again, after a re-authentication); 0 means the session has no end."""

    def reauthenticating(self) -> None:
        """A re-authentication began: only its requests are answered until it ends."""

    def authentication_failed(self) -> None:
        """The exchange failed: the connection closes once the answer (if any) has left."""


@dataclass(frozen=True, slots=True)
class AuthenticateResult:
    """SaslAuthenticate's answer, whatever its version."""

    error_code: ErrorCode
    error_message: str | None
    auth_bytes: bytes
    session_lifetime_ms: int = 0


class SaslAuthenticator:
    """One connection's SASL state: which requests it answers, the mechanism's server, who authenticated."""

    def __init__(self, listener: SaslListener, listener_name: str, peer: str, events: ConnectionEvents,
                 metrics: AuthenticationRecorder, *, max_reauth_ms: int, failure_delay_s: float) -> None:
        """`max_reauth_ms`: the listener's `connections.max.reauth.ms` (0: sessions never end, and a SaslHandshake
        on an authenticated connection is refused as Kafka's KafkaApis refuses it)."""
        self.listener = listener
        self.listener_name = listener_name
        self.peer = peer
        self.events = events
        self.metrics = metrics
        self.max_reauth_ms = max_reauth_ms
        self.failure_delay_s = failure_delay_s
        self.phase = Phase.HANDSHAKE
        self.mechanism: str | None = None
        self.principal: str | None = None  # set once authenticated; a re-authentication must keep it
        self._server: SaslServer | None = None
        self._claimed_user: str | None = None  # from the first token, for the log
        self._refusal: str | None = None  # a re-authentication that switched mechanism fails at its first token

    # -- what the connection and the handlers ask ---------------------------------------------------------------

    @property
    def raw(self) -> bool:
        """Whether the next frame is a bare token (after a v0 handshake) rather than a request."""
        return self.phase is Phase.RAW

    @property
    def is_reauthentication(self) -> bool:
        """Whether this exchange renews an authenticated session (its outcome is counted and logged as such)."""
        return self.principal is not None

    def expects(self, api_key: int) -> bool:
        """Whether a request of `api_key` is answered before the exchange is over (any other closes the
        connection, nothing sent, as Kafka's authenticator does)."""
        if self.phase is Phase.HANDSHAKE:
            return api_key in (API_VERSIONS, SASL_HANDSHAKE)
        return self.phase is Phase.AUTHENTICATE and api_key == SASL_AUTHENTICATE

    def accepts_handshake(self) -> bool:
        """Whether a SaslHandshake starts an exchange now: on a new connection, or to re-authenticate one whose
        session has a lifetime (KIP-368). Otherwise it is answered ILLEGAL_SASL_STATE and changes nothing."""
        return self.phase is Phase.HANDSHAKE or (self.phase is Phase.COMPLETE and self.max_reauth_ms > 0)

    def in_exchange(self) -> bool:
        """Whether a SaslAuthenticate carries the next token now (after a v1 handshake)."""
        return self.phase is Phase.AUTHENTICATE

    # -- the exchange -------------------------------------------------------------------------------------------

    def handshake(self, mechanism: str, version: int) -> ErrorCode:
        """Start an exchange with `mechanism` (UNSUPPORTED_SASL_MECHANISM, and a failed authentication, if this
        listener does not offer it); a v0 handshake is followed by bare tokens."""
        if self.phase is Phase.COMPLETE:
            self.events.reauthenticating()
        self._claimed_user = None
        if self._server_for(mechanism) is None:
            # Counted under one label: a client must not grow the metrics with names of its own making.
            self._fail(UNSUPPORTED, f"Unsupported SASL mechanism {mechanism!r}")
            return ErrorCode.unsupported_sasl_mechanism
        self.phase = Phase.RAW if version == 0 else Phase.AUTHENTICATE
        return ErrorCode.none

    def _server_for(self, mechanism: str) -> SaslServer | None:
        server = self.listener.new_server(mechanism)
        if server is None:
            return None
        if self.mechanism is not None and mechanism != self.mechanism:  # Kafka's REAUTH_BAD_MECHANISM
            self._refusal = (f"SASL mechanism '{mechanism}' requested by client is not supported for "
                             f"re-authentication of mechanism '{self.mechanism}'")
        self._server = server
        self.mechanism = mechanism
        return server

    def authenticate(self, token: bytes) -> AuthenticateResult:
        """Evaluate one SaslAuthenticate's token (the handler has checked `in_exchange`)."""
        outcome = self._evaluate(token)
        if isinstance(outcome, Failed):
            return AuthenticateResult(ErrorCode.sasl_authentication_failed, outcome.client_message, b"")
        if isinstance(outcome, Challenge):
            return AuthenticateResult(ErrorCode.none, None, outcome.data)
        return AuthenticateResult(ErrorCode.none, None, outcome.data, self.max_reauth_ms)

    def evaluate_raw(self, token: bytes) -> bytes | None:
        """One bare token after a v0 handshake: the bare answer to send back (size-prefixed, empty after PLAIN, as
        Kafka sends it), or None when the exchange failed (Kafka then closes without an answer)."""
        outcome = self._evaluate(token)
        if isinstance(outcome, Failed):
            return None
        return len(outcome.data).to_bytes(4, "big") + outcome.data

    def _evaluate(self, token: bytes) -> SaslOutcome:
        assert self._server is not None and self.mechanism is not None
        if self._claimed_user is None:
            self._claimed_user = _claimed_user(self.mechanism, token)
        if self._refusal is not None:
            outcome: SaslOutcome = Failed(self._refusal, self._refusal)
        else:
            outcome = self._server.evaluate(token)
        if isinstance(outcome, Authenticated):
            principal = str(outcome.principal)
            if self.principal not in (None, principal):
                message = f"Cannot change principals during re-authentication from {self.principal}: {principal}"
                outcome = Failed(message, message)
            else:
                self._succeed(principal)
        if isinstance(outcome, Failed):
            self._fail(self.mechanism, outcome.reason)
        return outcome

    def _succeed(self, principal: str) -> None:
        again = self.is_reauthentication
        self.phase = Phase.COMPLETE
        self.principal = principal
        self._server = None
        assert self.mechanism is not None
        self.metrics.record("successful_reauthentication" if again else "successful_authentication",
                            self.listener_name, self.mechanism)
        log.debug("%s %s on %s as %s with %s", "re-authenticated" if again else "authenticated", self.peer,
                  self.listener_name, principal, self.mechanism)
        self.events.authenticated(principal, self.max_reauth_ms / 1000.0)

    def _fail(self, mechanism: str, reason: str) -> None:
        again = self.is_reauthentication
        self.phase = Phase.FAILED
        self._server = None
        self.metrics.record("failed_reauthentication" if again else "failed_authentication", self.listener_name,
                            mechanism)
        log.info("Failed %s with %s on %s (mechanism %s, user %r): %s",
                 "re-authentication" if again else "authentication", self.peer, self.listener_name, mechanism,
                 self._claimed_user, reason)
        self.events.authentication_failed()

    async def delayed(self, answer: _T) -> _T:
        """`answer` after `connection.failed.authentication.delay.ms`: a client that guesses passwords gets its
        verdicts slowly (Kafka delays the answer and the close alike). At least that long by the clock: uvloop
        times a sleep from the loop's cached time, so a bare sleep can end early by however long the loop has
        worked since it last looked at the clock."""
        deadline = time.monotonic() + self.failure_delay_s
        while (left := deadline - time.monotonic()) > 0:
            await asyncio.sleep(left)
        return answer


def delayed_if_failed(sasl: SaslAuthenticator, answer: _T) -> _T | Awaitable[_T]:
    """The answer to send now, or after the failure delay when the exchange has just failed."""
    return sasl.delayed(answer) if sasl.phase is Phase.FAILED else answer


def _claimed_user(mechanism: str, token: bytes) -> str | None:
    """Who the first token says the client is (PLAIN's authcid, SCRAM's user name), for the log: never the password,
    which only PLAIN's third field and SCRAM's proof carry."""
    if mechanism == PLAIN:
        fields = token.split(b"\x00")
        return fields[1].decode("utf-8", errors="replace") if len(fields) == 3 else None
    try:
        return username_from_sasl_name(ClientFirst.parse(token).saslname)
    except (ScramMessageError, ScramError):
        return None
