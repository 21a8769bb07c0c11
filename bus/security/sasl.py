"""Sans-IO SASL servers for PLAIN and SCRAM-SHA-256/512, with Kafka's checks and messages.

The broker feeds each SaslAuthenticate's `auth_bytes` to `SaslServer.evaluate` and gets one outcome back:
`Challenge` (send its bytes, wait for the next token), `Authenticated` (send its bytes, the connection is
now the principal) or `Failed` (answer SASL_AUTHENTICATION_FAILED with `client_message` and close). Nothing
here raises on client input: every malformed, replayed or out-of-order token is a `Failed`.

`Failed.reason` is for the broker's log and `client_message` for the client; neither ever holds a password.
Like Kafka's `SaslServerAuthenticator`, failures that could tell an attacker something (an unknown user, a
bad proof) reach the client only as "Authentication failed during authentication due to invalid
credentials with SASL mechanism M"; the ones Kafka reports verbatim (PLAIN's, an authorization id that is
not the user) are reported verbatim here too.
"""

from __future__ import annotations

import abc
import hmac
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from bus.security.principal import KafkaPrincipal, user
from bus.security.scram import (
    ScramCredential,
    ScramCredentialStore,
    ScramError,
    ScramMechanism,
    random_string,
    username_from_sasl_name,
)
from bus.security.scram_messages import (
    ClientFinal,
    ClientFirst,
    ScramMessageError,
    ServerFinal,
    ServerFirst,
    auth_message,
)

_T = TypeVar("_T")
_R = TypeVar("_R")

PLAIN = "PLAIN"
# Kafka's `sasl.server.max.receive.size` default: the largest SASL token the broker reads before authentication.
SASL_SERVER_MAX_RECEIVE_SIZE = 524288


@dataclass(frozen=True, slots=True)
class Challenge:
    """The exchange goes on: send `data` to the client and evaluate its next token."""

    data: bytes


@dataclass(frozen=True, slots=True)
class Authenticated:
    """The client is `principal`; `data` is the last token to send it (SCRAM's server-final, empty for PLAIN)."""

    principal: KafkaPrincipal
    data: bytes = b""


@dataclass(frozen=True, slots=True)
class Failed:
    """Authentication failed: log `reason`, send `client_message` (SaslAuthenticate's error_message), close."""

    reason: str
    client_message: str


SaslOutcome = Challenge | Authenticated | Failed


class _Refused(Exception):
    """Raised inside a step; `public` reasons are sent to the client as they are (Kafka's
    SaslAuthenticationException), the others as the generic message (Kafka's SaslException)."""

    def __init__(self, reason: str, public: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.public = public


class SaslServer(abc.ABC):
    """One connection's authentication exchange for one mechanism; once it has ended, every token fails."""

    mechanism: str

    def __init__(self) -> None:
        self._ended = False

    @property
    def ended(self) -> bool:
        """Whether the exchange is over (authenticated or failed)."""
        return self._ended

    def evaluate(self, token: bytes) -> SaslOutcome:
        if self._ended:
            return self._failed(_Refused(f"Unexpected SASL token: the {self.mechanism} exchange is over"))
        try:
            outcome = self._step(token)
        except _Refused as refused:
            return self._failed(refused)
        self._ended = isinstance(outcome, Authenticated)
        return outcome

    def _failed(self, refused: _Refused) -> Failed:
        self._ended = True
        generic = f"Authentication failed during authentication due to invalid credentials with SASL mechanism " \
                  f"{self.mechanism}"
        return Failed(refused.reason, refused.reason if refused.public else generic)

    @abc.abstractmethod
    def _step(self, token: bytes) -> SaslOutcome:
        """The next outcome; raises _Refused to fail the exchange."""


class PlainSaslServer(SaslServer):
    """RFC 4616 `[authzid] NUL authcid NUL passwd` against the JAAS `user_<name>="<password>"` options."""

    mechanism = PLAIN

    def __init__(self, users: Mapping[str, str]) -> None:
        super().__init__()
        self._users = users

    def _step(self, token: bytes) -> SaslOutcome:
        tokens = token.decode("utf-8", errors="replace").split("\x00", 3)
        if len(tokens) != 3:
            raise _Refused(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(tokens)}", public=True)
        authzid, username, password = tokens
        if not username:
            raise _Refused("Authentication failed: username not specified", public=True)
        if not password:
            raise _Refused("Authentication failed: password not specified", public=True)
        expected = self._users.get(username)
        if expected is None or not hmac.compare_digest(password.encode("utf-8"), expected.encode("utf-8")):
            raise _Refused("Authentication failed: Invalid username or password", public=True)
        if authzid and authzid != username:
            raise _Refused("Authentication failed: Client requested an authorization id that is different from "
                           "username", public=True)
        return Authenticated(user(username))


class ScramSaslServer(SaslServer):
    """RFC 5802 / RFC 7677 server side, as Kafka's ScramSaslServer: client-first, then client-final.

    Kafka refuses an unknown user at the client-first (no fake salt), and so does this server: the client learns
    only the generic failure message either way.
    """

    def __init__(self, mechanism: ScramMechanism, credentials: ScramCredentialStore,
                 server_nonce: Callable[[], str] = random_string) -> None:
        """`server_nonce` makes the nonce appended to the client's; tests pin it to replay RFC 7677's example."""
        super().__init__()
        self._server_nonce = server_nonce
        self.mechanism = mechanism.name
        self._scram = mechanism
        self._credentials = credentials
        self._client_first: ClientFirst | None = None
        self._server_first: ServerFirst | None = None
        self._credential: ScramCredential | None = None
        self._username = ""

    def _step(self, token: bytes) -> SaslOutcome:
        if self._client_first is None:
            return self._first(token)
        return self._final(token)

    def _first(self, token: bytes) -> Challenge:
        client_first = _parse(ClientFirst.parse, token)
        if client_first.reserved is not None:
            raise _Refused("Authentication failed: unsupported mandatory SCRAM extension")
        if client_first.extensions.get("tokenauth", "").lower() == "true":
            raise _Refused("Authentication failed: delegation token authentication is not supported")
        username = _parse(username_from_sasl_name, client_first.saslname)
        credential = self._credentials.get(self.mechanism, username)
        if credential is None:
            raise _Refused("Authentication failed: Invalid user credentials")
        authzid = _parse(username_from_sasl_name, client_first.authzid) if client_first.authzid else ""
        if authzid and authzid != username:
            raise _Refused("Authentication failed: Client requested an authorization id that is different from "
                           "username", public=True)
        if credential.iterations < self._scram.min_iterations:
            raise _Refused(f"Iterations {credential.iterations} is less than the minimum "
                           f"{self._scram.min_iterations} for {self.mechanism}")
        self._client_first = client_first
        self._credential = credential
        self._username = username
        self._server_first = ServerFirst.build(client_first.nonce + self._server_nonce(), credential.salt,
                                               credential.iterations)
        return Challenge(self._server_first.text.encode())

    def _final(self, token: bytes) -> Authenticated:
        assert self._client_first is not None and self._server_first is not None and self._credential is not None
        client_final = _parse(ClientFinal.parse, token)
        # Kafka 3.8.1 to 4.0 check only that the client's nonce ends with the server's (CVE-2024-56128's fix), as
        # librdkafka before 2.6.1 sends its own nonce twice (client + server-first's); so do we, or kcat fails.
        if not client_final.nonce.endswith(self._server_first.nonce):
            raise _Refused("Invalid client nonce in the final client message.")
        if client_final.channel_binding != self._client_first.gs2_header.encode():
            raise _Refused("Invalid channel binding in the final client message.")
        message = auth_message(self._client_first.bare, self._server_first, client_final.without_proof)
        stored_key = self._credential.stored_key
        client_signature = self._scram.hmac(stored_key, message)
        if len(client_final.proof) != len(client_signature):
            raise _Refused("Invalid client credentials")
        client_key = bytes(a ^ b for a, b in zip(client_signature, client_final.proof, strict=True))
        if not hmac.compare_digest(self._scram.hash(client_key), stored_key):
            raise _Refused("Invalid client credentials")
        server_signature = self._scram.hmac(self._credential.server_key, message)
        return Authenticated(user(self._username), ServerFinal.build(server_signature))


def _parse(parser: Callable[[_T], _R], data: _T) -> _R:
    """`parser(data)`, its ValueErrors turned into a refusal (their messages never echo the token)."""
    try:
        return parser(data)
    except (ScramMessageError, ScramError) as exc:
        raise _Refused(str(exc)) from None
