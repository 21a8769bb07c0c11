"""Bearer tokens: HS256 JWTs (PyJWT) signed with a key generated once into the console's data dir.

A token names the user and the user's ``uid``; the role is looked up on each request, so a role
change or a removal takes effect at once, and the ``uid`` check ends tokens of a removed (or removed
and re-added) user. Expiry (``exp``) is checked by PyJWT.
"""

from __future__ import annotations

import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

import jwt

KEY_FILE = "signing_key"
ALGORITHM = "HS256"


def load_or_create_key(data_dir: Path) -> bytes:
    """The signing key, created (mode 0600, O_EXCL so two processes cannot both write it) the first time."""
    path = data_dir / KEY_FILE
    data_dir.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        key = path.read_bytes()
        if len(key) < 32:
            raise ValueError(f"signing key {path} is shorter than 32 bytes") from None
        return key
    with os.fdopen(fd, "wb") as handle:
        key = secrets.token_bytes(32)
        handle.write(key)
        handle.flush()
        os.fsync(handle.fileno())
    return key


@dataclass(frozen=True)
class TokenClaims:
    username: str
    uid: str


class TokenSigner:
    def __init__(self, key: bytes, ttl_s: int) -> None:
        self._key = key
        self.ttl_s = ttl_s

    def issue(self, username: str, uid: str) -> str:
        now = int(time.time())
        return jwt.encode({"sub": username, "uid": uid, "iat": now, "exp": now + self.ttl_s}, self._key,
                          algorithm=ALGORITHM)

    def verify(self, token: str) -> TokenClaims | None:
        """The claims of a valid, unexpired token signed by us; None for anything else."""
        try:
            claims = jwt.decode(token, self._key, algorithms=[ALGORITHM], options={"require": ["exp", "sub", "uid"]})
        except jwt.InvalidTokenError:
            return None
        if not isinstance(claims.get("sub"), str) or not isinstance(claims.get("uid"), str):
            return None
        return TokenClaims(claims["sub"], claims["uid"])
