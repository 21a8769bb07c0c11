"""Password hashes: argon2id through argon2-cffi with its (RFC 9106 low-memory) defaults.

Verification of an unknown user still costs one argon2 verify against a fixed hash, so the time a
failed login takes does not tell whether the name exists.
"""

from __future__ import annotations

from functools import cache

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

_hasher = PasswordHasher()


@cache
def _dummy_hash() -> str:
    """Made at the first unknown name, not at import: every process importing the console (its CLI tools, the
    tests) would otherwise pay an argon2 hash (64 MiB, a few hundred ms on a loaded machine) it may never use."""
    return _hasher.hash("not a password anyone has")

MIN_LENGTH = 8
MAX_LENGTH = 256


def hash_password(password: str) -> str:
    return _hasher.hash(password)


def verify_password(password_hash: str | None, password: str) -> bool:
    """True when ``password`` matches; ``None`` (no such user) is checked against a dummy hash and fails."""
    try:
        _hasher.verify(password_hash or _dummy_hash(), password)
    except (VerifyMismatchError, VerificationError, InvalidHashError):
        return False
    return password_hash is not None


def password_problem(password: str) -> str | None:
    """Why a new password is refused, or None."""
    if len(password) < MIN_LENGTH:
        return f"password must have at least {MIN_LENGTH} characters"
    if len(password) > MAX_LENGTH:
        return f"password must have at most {MAX_LENGTH} characters"
    return None
