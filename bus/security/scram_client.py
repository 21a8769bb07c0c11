"""A sans-IO SCRAM client (RFC 5802 / RFC 7677) with the checks of Kafka's `ScramSaslClient`.

The caller sends `first_message()` in a SaslAuthenticate, passes the answer to `final_message(...)`, sends
that, and passes the last answer to `verify(...)`: the server has then proved it knows the credential too.
Any misbehaving server raises `ScramClientError`; the password never appears in it.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from typing import TypeVar

from bus.security.scram import ScramMechanism, random_string, sasl_name, scram_mechanism
from bus.security.scram_messages import (
    ScramMessageError,
    ServerFinal,
    ServerFirst,
    auth_message,
    b64,
    client_final_without_proof,
)

_M = TypeVar("_M")
_GS2_HEADER = "n,,"  # no channel binding, no authorization id: what Kafka's client sends


class ScramClientError(ValueError):
    """The server's SCRAM messages are malformed, refused us, or failed to prove the server knows our credential."""


class ScramClient:
    """One authentication of `username` with `password`; messages must be used in order, once each."""

    def __init__(self, mechanism: str | ScramMechanism, username: str, password: str, nonce: str | None = None) -> None:
        self.mechanism = scram_mechanism(mechanism) if isinstance(mechanism, str) else mechanism
        self._password = password
        self._nonce = random_string() if nonce is None else nonce
        self._bare = f"n={sasl_name(username)},r={self._nonce}"
        self._state = "first"
        self._server_signature = b""

    def first_message(self) -> bytes:
        self._advance("first", "server-first")
        return f"{_GS2_HEADER}{self._bare}".encode()

    def final_message(self, server_first_message: bytes) -> bytes:
        """The client-final (with our proof) answering the server-first."""
        self._advance("server-first", "server-final")
        server_first = _parse(ServerFirst.parse, server_first_message)
        if not server_first.nonce.startswith(self._nonce):
            raise ScramClientError("Invalid server nonce: does not start with client nonce")
        scram = self.mechanism
        if server_first.iterations < scram.min_iterations:
            raise ScramClientError(f"Requested iterations {server_first.iterations} is less than the minimum "
                                   f"{scram.min_iterations} for {scram.name}")
        if server_first.iterations > scram.max_iterations:  # Kafka never stores more; a hostile server could ask
            raise ScramClientError(f"Requested iterations {server_first.iterations} is more than the maximum "
                                   f"{scram.max_iterations} for {scram.name}")
        salted = scram.salted_password(self._password, server_first.salt, server_first.iterations)
        without_proof = client_final_without_proof(_GS2_HEADER, server_first.nonce)
        message = auth_message(self._bare, server_first, without_proof)
        client_key = scram.client_key(salted)
        client_signature = scram.hmac(scram.hash(client_key), message)
        proof = bytes(a ^ b for a, b in zip(client_key, client_signature, strict=True))
        self._server_signature = scram.hmac(scram.server_key(salted), message)
        return f"{without_proof},p={b64(proof)}".encode()

    def verify(self, server_final_message: bytes) -> None:
        """Check the server-final; returns only if the server's signature proves it holds our credential."""
        self._advance("server-final", "done")
        server_final = _parse(ServerFinal.parse, server_final_message)
        if server_final.error is not None:
            raise ScramClientError(f"Sasl authentication using {self.mechanism.name} failed with error: "
                                   f"{server_final.error}")
        if not hmac.compare_digest(server_final.signature or b"", self._server_signature):
            raise ScramClientError("Invalid server signature in server final message")

    def _advance(self, expected: str, then: str) -> None:
        if self._state != expected:
            raise ScramClientError(f"SCRAM client used out of order: expected the {self._state} step")
        self._state = then


def _parse(parser: Callable[[bytes], _M], data: bytes) -> _M:
    try:
        return parser(data)
    except ScramMessageError as exc:
        raise ScramClientError(str(exc)) from None
