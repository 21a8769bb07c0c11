"""The admin client's SCRAM credential calls: Java's `Admin.describeUserScramCredentials` and
`alterUserScramCredentials` (KIP-554).

As Kafka's admin client does, this one salts the password itself: an upsertion goes out as (salt, iterations,
Hi(password, salt, iterations)), so the password never travels, and the broker derives the stored and server
keys from the salted password. Descriptions carry mechanisms and iteration counts only, never a salt or a key.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from bus.client.admin.common import AdminCalls, AdminError, check_error, finish
from bus.security.scram import SCRAM_MECHANISMS, ScramError, ScramMechanism, random_salt, scram_mechanism

DESCRIBE_USER_SCRAM_CREDENTIALS, ALTER_USER_SCRAM_CREDENTIALS = 50, 51
_MECHANISM_NAMES = {mechanism.type: name for name, mechanism in SCRAM_MECHANISMS.items()}


@dataclass(frozen=True, slots=True)
class ScramCredentialInfo:
    """A user's credential for one mechanism, as described: its mechanism name and iteration count."""

    mechanism: str
    iterations: int


@dataclass(frozen=True, slots=True)
class UserScramCredentialUpsertion:
    """Create or replace `user`'s credential for `mechanism` ("SCRAM-SHA-256" or "SCRAM-SHA-512"); the salt is random
    unless given."""

    user: str
    mechanism: str
    iterations: int
    password: str = field(repr=False)
    salt: bytes | None = field(default=None, repr=False)


@dataclass(frozen=True, slots=True)
class UserScramCredentialDeletion:
    """Delete `user`'s credential for `mechanism`."""

    user: str
    mechanism: str


ScramCredentialAlteration = UserScramCredentialUpsertion | UserScramCredentialDeletion


def _mechanism(name: str) -> ScramMechanism:
    try:
        return scram_mechanism(name)
    except ScramError as exc:
        raise AdminError(ErrorCode.unsupported_sasl_mechanism, str(exc)) from None


def _salted(upsertion: UserScramCredentialUpsertion) -> dict[str, Any]:
    """An upsertion's wire fields, salted here so that the request holds no password."""
    mechanism = _mechanism(upsertion.mechanism)
    salt = random_salt() if upsertion.salt is None else upsertion.salt
    return {"name": upsertion.user, "mechanism": mechanism.type, "iterations": upsertion.iterations, "salt": salt,
            "salted_password": mechanism.salted_password(upsertion.password, salt, upsertion.iterations)}


class ScramAdmin:
    """The SCRAM credential calls `AdminClient` inherits."""

    def describe_user_scram_credentials(self: AdminCalls, users: Iterable[str] | None = None
                                        ) -> dict[str, list[ScramCredentialInfo]]:
        """Each user's credentials (every user with one when `users` is None); a named user without credentials is
        left out, as Java's `DescribeUserScramCredentialsResult.users()` leaves it out."""
        names = None if users is None else list(dict.fromkeys(users))

        def build(s: Any) -> Any:
            return s.make("DescribeUserScramCredentialsRequest",
                          users=None if names is None else [s.make("UserName", name=name) for name in names])

        def attempt() -> dict[str, list[ScramCredentialInfo]]:
            response = self._send(self._any_node(), DESCRIBE_USER_SCRAM_CREDENTIALS, build)
            check_error(response.error_code, response.error_message)
            out: dict[str, list[ScramCredentialInfo]] = {}
            for result in response.results:
                if result.error_code == ErrorCode.resource_not_found:
                    continue
                check_error(result.error_code, result.error_message)
                out[result.user] = [ScramCredentialInfo(_MECHANISM_NAMES.get(int(info.mechanism), "UNKNOWN"),
                                                        int(info.iterations)) for info in result.credential_infos]
            return out

        return self._call(attempt, "describe user scram credentials")

    def alter_user_scram_credentials(self: AdminCalls, alterations: Iterable[ScramCredentialAlteration], *,
                                     raise_on_error: bool = True) -> dict[str, AdminError | None]:
        """Apply the upsertions and deletions; user -> None or the error of (one of) its alterations."""
        changes = list(alterations)
        if not changes:
            return {}
        deletions = [{"name": c.user, "mechanism": _mechanism(c.mechanism).type}
                     for c in changes if isinstance(c, UserScramCredentialDeletion)]
        upsertions = [_salted(c) for c in changes if isinstance(c, UserScramCredentialUpsertion)]

        def build(s: Any) -> Any:
            return s.make("AlterUserScramCredentialsRequest",
                          deletions=[s.make("ScramCredentialDeletion", **d) for d in deletions],
                          upsertions=[s.make("ScramCredentialUpsertion", **u) for u in upsertions])

        def attempt() -> dict[str, AdminError | None]:
            response = self._send(self._any_node(), ALTER_USER_SCRAM_CREDENTIALS, build)
            return {r.user: AdminError.of(r.error_code, r.error_message) if r.error_code else None
                    for r in response.results}

        return finish(self._call(attempt, "alter user scram credentials"), raise_on_error)
