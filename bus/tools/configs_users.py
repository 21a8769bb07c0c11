"""`bus configs --entity-type users`: users' SCRAM credentials, as kafka-configs.sh manages them (KIP-554).

`--alter --add-config 'SCRAM-SHA-256=[iterations=8192,password=alice-secret]'` creates or replaces a credential
(iterations default to 4096), `--delete-config SCRAM-SHA-256` deletes one, both through AlterUserScramCredentials
(one request per change, see `alter_user`): the admin client salts the password, which never goes over the wire.
`--describe` prints Kafka's `SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-256=iterations=8192`
line per user with credentials (all of them without `--entity-name`). Kafka's users also carry client quotas, which
this broker does not serve; quota configs are refused with a message saying so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bus.security.scram import SCRAM_MECHANISMS, ScramError
from bus.security.scram_formats import parse_scram_config
from bus.tools._common import ToolError

if TYPE_CHECKING:
    from bus.client.admin import AdminClient, ScramCredentialAlteration

# Kafka's QuotaConfig user and client quota names (kafka-configs sends them with AlterClientQuotas).
QUOTA_CONFIGS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage", "controller_mutation_rate")


def _check_names(names: list[str], verb: str) -> None:
    unknown = [name for name in names if name not in SCRAM_MECHANISMS and name not in QUOTA_CONFIGS]
    if unknown:
        raise ToolError(f"Only quota and SCRAM credential configs can be {verb} for 'users' using --bootstrap-server. "
                        f"Unexpected config names: {','.join(unknown)}")
    quotas = [name for name in names if name in QUOTA_CONFIGS]
    if quotas:
        raise ToolError(f"Client quota configs ({','.join(quotas)}) are not supported by this broker: only SCRAM "
                        "credential configs can be altered for 'users'")


def scram_alterations(user: str, adds: dict[str, str], deletes: list[str]) -> list[ScramCredentialAlteration]:
    """The AlterUserScramCredentials changes of `--add-config` (mechanism -> `[iterations=N,]password=P`) and
    `--delete-config` (mechanisms), checked as Kafka's ConfigCommand checks them; errors never show a password."""
    from bus.client.admin import UserScramCredentialDeletion, UserScramCredentialUpsertion

    _check_names(list(adds), "added")
    _check_names(deletes, "deleted")
    changes: list[ScramCredentialAlteration] = [UserScramCredentialDeletion(user, name) for name in deletes]
    for mechanism, value in adds.items():
        try:
            scram = parse_scram_config(mechanism, value)
        except ScramError as exc:
            raise ToolError(str(exc)) from None
        changes.append(UserScramCredentialUpsertion(user, scram.mechanism.name, scram.iterations, scram.password))
    return changes


def alter_user(admin: AdminClient, user: str, adds: dict[str, str], deletes: list[str]) -> None:
    """Apply the changes, one request each: a KRaft controller refuses two changes of one user in one request
    (DUPLICATE_RESOURCE), which would fail the `SCRAM-SHA-256=[...],SCRAM-SHA-512=[...]` of Kafka's own docs. The
    first refused change stops the rest and reaches the caller as an AdminError."""
    for change in scram_alterations(user, adds, deletes):
        admin.alter_user_scram_credentials([change])


def describe_users(admin: AdminClient, user: str | None) -> None:
    for name, infos in admin.describe_user_scram_credentials(None if user is None else [user]).items():
        credentials = ", ".join(f"{info.mechanism}=iterations={info.iterations}" for info in infos)
        print(f"SCRAM credential configs for user-principal '{name}' are {credentials}")
