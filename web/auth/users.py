"""The user store: console users in HBase (``contracts.tables.console``), looked up through a short cache."""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime

from contracts.tables import console as tables
from web.auth.cache import TTLCache
from web.auth.passwords import hash_password, password_problem, verify_password
from web.auth.roles import Role
from web.auth.table import Connect, ConsoleTable

USERNAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}")
USERNAME_RULE = "1-64 characters: letters, digits and _ . @ - (starting with a letter or digit)"

class UserExists(Exception):
    pass


class BadUserInput(ValueError):
    """A username, password or role that cannot be stored; the message says which and why."""


@dataclass(frozen=True)
class StoredUser:
    username: str
    role: Role
    password_hash: str
    uid: str
    created: str


def check_new_user(username: str, password: str, role: str) -> Role:
    if not USERNAME_RE.fullmatch(username):
        raise BadUserInput(f"username must be {USERNAME_RULE}")
    problem = password_problem(password)
    if problem:
        raise BadUserInput(problem)
    try:
        return Role(role)
    except ValueError:
        raise BadUserInput(f"role must be one of {', '.join(r.value for r in Role)}") from None


class UserStore:
    def __init__(self, connect: Connect, cache_ttl_s: float = 2.0) -> None:
        self._table = ConsoleTable(connect, tables.USER_TABLE)
        self._cache: TTLCache[StoredUser | None] = TTLCache(cache_ttl_s)

    def _load(self, username: str) -> StoredUser | None:
        if not USERNAME_RE.fullmatch(username):
            return None
        with self._table.open() as table:
            cells = table.row(tables.user_row_key(username))
        return _from_cells(cells) if cells else None

    def get(self, username: str) -> StoredUser | None:
        return self._cache.get(username, lambda: self._load(username))

    def authenticate(self, username: str, password: str) -> StoredUser | None:
        """The user when the password matches (always one argon2 verify, whether the name exists or not)."""
        user = self._load(username)
        ok = verify_password(user.password_hash if user else None, password)
        return user if ok else None

    def create(self, username: str, password: str, role: str) -> StoredUser:
        checked_role = check_new_user(username, password, role)
        if self._load(username) is not None:
            raise UserExists(username)
        created = datetime.now(UTC).isoformat(timespec="seconds")
        user = StoredUser(username, checked_role, hash_password(password), secrets.token_hex(8), created)
        with self._table.open() as table:
            table.put(tables.user_row_key(username),
                      tables.user_row(username, user.role.value, user.password_hash, user.uid, created))
        self._cache.invalidate(username)
        return user

    def list(self) -> list[StoredUser]:
        with self._table.open() as table:
            rows = list(table.scan())
        return sorted((_from_cells(cells) for _key, cells in rows), key=lambda u: u.username)

    def remove(self, username: str) -> bool:
        """Delete the user; False when there was none. Its tokens and sessions stop working (uid check)."""
        existed = self._load(username) is not None
        if existed:
            with self._table.open() as table:
                table.delete(tables.user_row_key(username))
        self._cache.invalidate(username)
        return existed


def _from_cells(cells: dict[bytes, bytes]) -> StoredUser:
    fields = tables.read_user(cells)
    return StoredUser(fields["username"], Role(fields["role"]), fields["hash"], fields["uid"], fields["created"])
