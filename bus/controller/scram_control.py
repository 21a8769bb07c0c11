"""Users' SCRAM credentials (KIP-554, Kafka's ScramControlManager): AlterUserScramCredentials as metadata records.

AlterUserScramCredentials commits `user_scram_credential` and `remove_user_scram_credential` records (salt,
StoredKey, ServerKey, iterations), and `bus storage format --add-scram` has the first ones committed with the
cluster id (the controller's `bootstrap_records`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from bus.controller.control_context import ControlContext
from bus.controller.errors import ControllerError
from bus.controller.image import remove_scram_credential_record, scram_credential_record
from bus.security.scram import SCRAM_MECHANISMS, ScramCredential, ScramMechanism


@dataclass(frozen=True, slots=True)
class ScramUpsertion:
    """One AlterUserScramCredentials upsertion: the client salted the password (`salted_password` = Hi(password,
    salt, iterations)), so the password itself never reaches the broker."""

    name: str
    mechanism: int  # Kafka's ScramMechanism type: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512
    iterations: int
    salt: bytes
    salted_password: bytes


class ScramControlManager:
    def __init__(self, context: ControlContext) -> None:
        self._context = context

    def alter_user_scram_credentials(self, deletions: Sequence[tuple[str, int]],
                                     upsertions: Sequence[ScramUpsertion]) -> list[tuple[str, ControllerError | None]]:
        """Delete (user, mechanism type) and upsert credentials; one result per user, as Kafka answers: the deleted
        users, the upserted ones, then the refused ones. A user named twice in one request is refused
        (DUPLICATE_RESOURCE), whatever the mechanisms; the accepted changes go in one entry. The controller keeps
        StoredKey and ServerKey, computed here from the salted password the client sent (never a password)."""
        self._context.check_active()
        deleting: dict[str, str] = {}  # user -> mechanism name
        upserting: dict[str, tuple[ScramMechanism, ScramUpsertion]] = {}
        refused: dict[str, ControllerError] = {}
        for name, mechanism_type in deletions:
            if name in refused:
                continue
            if deleting.pop(name, None) is not None:
                refused[name] = _altered_twice()
                continue
            try:
                mechanism = _scram_mechanism(name, mechanism_type)
                if (mechanism.name, name) not in self._context.working.scram_credentials:
                    raise ControllerError(ErrorCode.resource_not_found,
                                          "Attempt to delete a user credential that does not exist")
            except ControllerError as exc:
                refused[name] = exc
                continue
            deleting[name] = mechanism.name
        for upsertion in upsertions:
            name = upsertion.name
            if name in refused:
                continue
            if deleting.pop(name, None) is not None or upserting.pop(name, None) is not None:
                refused[name] = _altered_twice()
                continue
            try:
                mechanism = _scram_mechanism(name, upsertion.mechanism)
                if upsertion.iterations < mechanism.min_iterations:
                    raise ControllerError(ErrorCode.unacceptable_credential, "Too few iterations")
                if upsertion.iterations > mechanism.max_iterations:
                    raise ControllerError(ErrorCode.unacceptable_credential, "Too many iterations")
            except ControllerError as exc:
                refused[name] = exc
                continue
            upserting[name] = (mechanism, upsertion)
        records = [remove_scram_credential_record(name, mechanism_name) for name, mechanism_name in deleting.items()]
        records += [scram_credential_record(name, mechanism.name, ScramCredential.from_salted_password(
                        mechanism, upsertion.salt, upsertion.salted_password, upsertion.iterations))
                    for name, (mechanism, upsertion) in upserting.items()]
        if records:
            self._context.commit(records)
        return [(name, None) for name in (*deleting, *upserting)] + list(refused.items())


def _scram_mechanism(name: str, mechanism_type: int) -> ScramMechanism:
    """The mechanism of a type code, after Kafka's checks of the user name and the code."""
    if not name:
        raise ControllerError(ErrorCode.unacceptable_credential, "Username must not be empty")
    for mechanism in SCRAM_MECHANISMS.values():
        if mechanism.type == mechanism_type:
            return mechanism
    raise ControllerError(ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism")


def _altered_twice() -> ControllerError:
    return ControllerError(ErrorCode.duplicate_resource,
                           "A user credential cannot be altered twice in the same request")
