"""The ACL table of `contracts/bus_acls.py` made true on one site's bus: what a switchover (`dr_mirror/switchover.py`)
applies when it swaps the sites' roles, and what `make up` applies at start (`deploy/acls.py`). Here rather than in
contracts/, which imports no client.

Applying is idempotent and exact: the table's missing ACLs are created, and an ACL of a service principal that the
table does not name at that site in that role is deleted, so the brokers hold the table and nothing else (as the super
user ``admin``, whose settings are given in Java keys).
"""

from __future__ import annotations

from collections.abc import Mapping

from bus.client.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AdminClient,
    PatternType,
    PermissionType,
    ResourceType,
)
from contracts.bus_acls import MATRIX, Binding, Role, all_bindings
from contracts.topics import Topics


def _acl(binding: Binding) -> AclBinding:
    return AclBinding(ResourceType[binding.resource.value], binding.name, PatternType[binding.pattern],
                      binding.user, "*", AclOperation[binding.operation.value], PermissionType.ALLOW)


def sync(admin: AdminClient, topics: Topics, role: Role, site: str | None = None, *,
         fenced: bool = False) -> tuple[int, int]:
    """The table of ``site`` in ``role`` (``fenced``: without the devices' grants) applied through ``admin``;
    (created, deleted)."""
    wanted = {_acl(binding) for binding in all_bindings(topics, role, site, fenced=fenced)}
    held: set[AclBinding] = set()
    for principal in MATRIX:
        held.update(admin.describe_acls(AclBindingFilter(
            ResourceType.ANY, None, PatternType.ANY, f"User:{principal}", None, AclOperation.ANY, PermissionType.ANY)))
    stale = held - wanted
    admin.create_acls(sorted(wanted - held, key=str))
    admin.delete_acls([AclBindingFilter(a.resource_type, a.resource_name, a.pattern_type, a.principal, a.host,
                                        a.operation, a.permission) for a in sorted(stale, key=str)])
    return len(wanted - held), len(stale)


def apply(admin_settings: Mapping[str, str], topics: Topics, role: Role, site: str | None = None) -> tuple[int, int]:
    """:func:`sync` with an admin client of its own."""
    with AdminClient(dict(admin_settings)) as admin:
        return sync(admin, topics, role, site)
