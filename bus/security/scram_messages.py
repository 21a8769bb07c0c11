"""The four SCRAM messages, parsed with the grammar Kafka's `ScramMessages` accepts.

Kafka matches each message against a regular expression over 7-bit characters (so user names and nonces
are ASCII), supports only the gs2 header `n` (no channel binding) and ignores extensions it does not know.
The server and the client here share these parsers, so both sides refuse the same malformed input. Parse
errors say what is wrong, never echo the message (a client-final carries a proof).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from dataclasses import dataclass

_ALPHA = r"[A-Za-z]+"
_VALUE_SAFE = r"[\x01-\x2b\x2d-\x3c\x3e-\x7f]+"  # 7-bit, no NUL, no `,` or `=`
_VALUE = r"[\x01-\x2b\x2d-\x7f]+"  # 7-bit, no NUL, no `,`
_PRINTABLE = r"[\x21-\x2b\x2d-\x7e]+"  # printable, no `,`
_SASLNAME = r"(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+"
_BASE64 = r"(?:[a-zA-Z0-9/+]{4})*(?:[a-zA-Z0-9/+]{3}=|[a-zA-Z0-9/+]{2}==)?"
_RESERVED = rf"(?:m=(?P<reserved>{_VALUE}),)?"
_EXTENSIONS = rf"(?P<extensions>(?:,{_ALPHA}={_VALUE})*)"

_CLIENT_FIRST = re.compile(
    rf"(?P<gs2>n,(?:a=(?P<authzid>{_SASLNAME}))?,){_RESERVED}"
    rf"(?P<bare>n=(?P<saslname>{_SASLNAME}),r=(?P<nonce>{_PRINTABLE}){_EXTENSIONS})"
)
_SERVER_FIRST = re.compile(
    rf"{_RESERVED}r=(?P<nonce>{_PRINTABLE}),s=(?P<salt>{_BASE64}),i=(?P<iterations>[0-9]+){_EXTENSIONS}"
)
_CLIENT_FINAL = re.compile(
    rf"(?P<without_proof>c=(?P<channel>{_BASE64}),r=(?P<nonce>{_PRINTABLE}){_EXTENSIONS}),p=(?P<proof>{_BASE64})"
)
_SERVER_FINAL = re.compile(rf"(?:e=(?P<error>{_VALUE_SAFE}))|(?:v=(?P<signature>{_BASE64}){_EXTENSIONS})")


class ScramMessageError(ValueError):
    """A SCRAM message that does not follow the grammar."""


def _text(data: bytes) -> str:
    """Bytes as Java's `new String(bytes, UTF_8)` sees them: bad sequences become U+FFFD (then fail the grammar)."""
    return data.decode("utf-8", errors="replace")


def _b64(text: str) -> bytes:
    """Base64 the grammar has already checked (alphabet and padding), so decoding cannot fail."""
    return base64.b64decode(text, validate=True)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _extensions(text: str) -> dict[str, str]:
    """`,k=v,k2=v2` as Kafka's `Utils.parseMap` reads it (the first `=` splits; later keys win)."""
    return dict(item.split("=", 1) for item in text[1:].split(",")) if text else {}


@dataclass(frozen=True, slots=True)
class ClientFirst:
    """`n,[a=authzid],n=saslname,r=nonce[,extensions]`; `bare` is the part after the gs2 header."""

    gs2_header: str
    authzid: str  # as sent (saslname-encoded), "" when absent
    saslname: str
    nonce: str
    extensions: Mapping[str, str]
    reserved: str | None  # RFC 5802's mandatory extension `m=`, which we support none of
    bare: str

    @classmethod
    def parse(cls, data: bytes) -> ClientFirst:
        match = _CLIENT_FIRST.fullmatch(_text(data))
        if match is None:
            raise ScramMessageError("Invalid SCRAM client first message format")
        return cls(match["gs2"], match["authzid"] or "", match["saslname"], match["nonce"],
                   _extensions(match["extensions"]), match["reserved"], match["bare"])


@dataclass(frozen=True, slots=True)
class ServerFirst:
    """`r=nonce,s=salt,i=iterations`: the client's nonce with the server's appended, and the credential's salt."""

    nonce: str
    salt: bytes
    iterations: int
    text: str

    @classmethod
    def parse(cls, data: bytes) -> ServerFirst:
        text = _text(data)
        match = _SERVER_FIRST.fullmatch(text)
        if match is None:
            raise ScramMessageError("Invalid SCRAM server first message format")
        iterations = int(match["iterations"])
        if not 0 < iterations < 2**31:
            raise ScramMessageError("Invalid SCRAM server first message format: invalid iterations")
        return cls(match["nonce"], _b64(match["salt"]), iterations, text)

    @classmethod
    def build(cls, nonce: str, salt: bytes, iterations: int) -> ServerFirst:
        return cls(nonce, salt, iterations, f"r={nonce},s={b64(salt)},i={iterations}")


@dataclass(frozen=True, slots=True)
class ClientFinal:
    """`c=channel-binding,r=nonce[,extensions],p=proof`; `without_proof` is what the auth message includes."""

    channel_binding: bytes
    nonce: str
    proof: bytes
    without_proof: str

    @classmethod
    def parse(cls, data: bytes) -> ClientFinal:
        match = _CLIENT_FINAL.fullmatch(_text(data))
        if match is None:
            raise ScramMessageError("Invalid SCRAM client final message format")
        return cls(_b64(match["channel"]), match["nonce"], _b64(match["proof"]), match["without_proof"])


@dataclass(frozen=True, slots=True)
class ServerFinal:
    """`v=server-signature`, or `e=error` when the server refuses."""

    signature: bytes | None
    error: str | None

    @classmethod
    def parse(cls, data: bytes) -> ServerFinal:
        match = _SERVER_FINAL.fullmatch(_text(data))
        if match is None:
            raise ScramMessageError("Invalid SCRAM server final message format")
        if match["error"] is not None:
            return cls(None, match["error"])
        return cls(_b64(match["signature"]), None)

    @staticmethod
    def build(signature: bytes) -> bytes:
        """`v=...`: a server that refuses fails the exchange instead of sending `e=...`, as Kafka's does."""
        return f"v={b64(signature)}".encode()


def client_final_without_proof(gs2_header: str, nonce: str) -> str:
    """`c=base64(gs2 header),r=nonce`: what a client sends before its proof, and signs."""
    return f"c={b64(gs2_header.encode())},r={nonce}"


def auth_message(client_first_bare: str, server_first: ServerFirst, without_proof: str) -> bytes:
    """client-first-bare "," server-first "," client-final-without-proof (RFC 5802 section 3): what both sign."""
    return f"{client_first_bare},{server_first.text},{without_proof}".encode()
