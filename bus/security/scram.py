"""SCRAM (RFC 5802, RFC 7677) key derivation and stored credentials, as Kafka's `ScramFormatter` does them.

A broker never keeps passwords: it keeps, per user and mechanism, the salt, the iteration count, StoredKey
= H(HMAC(SaltedPassword, "Client Key")) and ServerKey = HMAC(SaltedPassword, "Server Key"), where
SaltedPassword = Hi(password, salt, i) is PBKDF2-HMAC. Kafka normalizes passwords to plain UTF-8 (no
SASLprep), and so do we: a password that works with Kafka's clients works here.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass, field
from typing import Protocol


class ScramError(ValueError):
    """A SCRAM argument Kafka would refuse (a bad user name, iteration count, ...); never holds a password."""


@dataclass(frozen=True, slots=True)
class ScramMechanism:
    """One SCRAM mechanism: its SASL name, hash, and Kafka's record type byte and iteration bounds."""

    name: str
    hash_name: str
    type: int  # UserScramCredentialRecord.mechanism
    min_iterations: int = 4096
    max_iterations: int = 16384

    def hmac(self, key: bytes, message: bytes) -> bytes:
        return hmac.new(key, message, self.hash_name).digest()

    def hash(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()

    def salted_password(self, password: str, salt: bytes, iterations: int) -> bytes:
        """Hi(Normalize(password), salt, i): PBKDF2 with this mechanism's HMAC and one block."""
        return hashlib.pbkdf2_hmac(self.hash_name, password.encode("utf-8"), salt, iterations)

    def client_key(self, salted_password: bytes) -> bytes:
        return self.hmac(salted_password, b"Client Key")

    def server_key(self, salted_password: bytes) -> bytes:
        return self.hmac(salted_password, b"Server Key")


SCRAM_SHA_256 = ScramMechanism("SCRAM-SHA-256", "sha256", 1)
SCRAM_SHA_512 = ScramMechanism("SCRAM-SHA-512", "sha512", 2)
SCRAM_MECHANISMS: dict[str, ScramMechanism] = {m.name: m for m in (SCRAM_SHA_256, SCRAM_SHA_512)}


def scram_mechanism(name: str) -> ScramMechanism:
    """The mechanism called `name` (`SCRAM-SHA-256` or `SCRAM-SHA-512`, exactly as Kafka spells them)."""
    try:
        return SCRAM_MECHANISMS[name]
    except KeyError:
        raise ScramError(f"SCRAM mechanism {name} is not supported (supported: {', '.join(SCRAM_MECHANISMS)})") \
            from None


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What a broker stores for one user and mechanism (Kafka's ScramCredential / UserScramCredentialRecord)."""

    salt: bytes
    stored_key: bytes = field(repr=False)
    server_key: bytes = field(repr=False)
    iterations: int

    @classmethod
    def from_salted_password(cls, mechanism: ScramMechanism, salt: bytes, salted_password: bytes,
                             iterations: int) -> ScramCredential:
        client_key = mechanism.client_key(salted_password)
        return cls(salt, mechanism.hash(client_key), mechanism.server_key(salted_password), iterations)

    @classmethod
    def from_password(cls, mechanism: ScramMechanism, password: str, iterations: int,
                      salt: bytes | None = None) -> ScramCredential:
        """A new credential; the salt is random like Kafka's (the UTF-8 of a random base-36 string) unless given."""
        salt = random_salt() if salt is None else salt
        return cls.from_salted_password(mechanism, salt, mechanism.salted_password(password, salt, iterations),
                                        iterations)


class ScramCredentialStore(Protocol):
    """Where a SCRAM server finds credentials; on a broker, the metadata image's user SCRAM credentials."""

    def get(self, mechanism: str, user: str) -> ScramCredential | None:
        """The credential of `user` for `mechanism` (e.g. "SCRAM-SHA-256"), None if it has none."""
        ...


class ScramCredentials:
    """A credential store held in memory: (mechanism, user) -> credential."""

    def __init__(self) -> None:
        self._credentials: dict[tuple[str, str], ScramCredential] = {}

    def get(self, mechanism: str, user: str) -> ScramCredential | None:
        return self._credentials.get((mechanism, user))

    def put(self, mechanism: str, user: str, credential: ScramCredential) -> None:
        self._credentials[(mechanism, user)] = credential


def random_string() -> str:
    """130 random bits in base 36, as Kafka's `ScramFormatter.secureRandomString` makes nonces and salts."""
    value = secrets.randbits(130)
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        value, digit = divmod(value, 36)
        out = digits[digit] + out
        if value == 0:
            return out


def random_salt() -> bytes:
    return random_string().encode("ascii")


def sasl_name(username: str) -> str:
    """A user name as it travels in SCRAM messages: `=` as `=3D`, `,` as `=2C` (RFC 5802 saslname)."""
    return username.replace("=", "=3D").replace(",", "=2C")


def username_from_sasl_name(name: str) -> str:
    """The user name a saslname encodes; any `=` not starting `=2C` or `=3D` is refused (Kafka's `username`)."""
    decoded = name.replace("=2C", ",")
    if "=" in decoded.replace("=3D", ""):
        raise ScramError("Invalid username: bad = escape in SCRAM user name")
    return decoded.replace("=3D", "=")


def check_iterations(mechanism: ScramMechanism, iterations: int) -> None:
    """Kafka's bounds on a new credential's iteration count (ScramParser, AlterUserScramCredentials)."""
    if iterations < mechanism.min_iterations:
        raise ScramError(f"The 'iterations' value must be >= {mechanism.min_iterations} for {mechanism.name}")
    if iterations > mechanism.max_iterations:
        raise ScramError(f"The 'iterations' value must be <= {mechanism.max_iterations} for {mechanism.name}")
