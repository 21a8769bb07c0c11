"""The admin client's ACL calls: Java's `Admin.createAcls`, `describeAcls` and `deleteAcls`.

Bindings and filters are Kafka's ACL model (`bus.security.acls`: AclBinding, AclBindingFilter and the wire enums),
so what is created is exactly what the broker stores. Like Kafka's admin client, the requests go to any broker
(the broker forwards CreateAcls and DeleteAcls to the active controller, and answers once the change is
committed). Per-ACL and per-filter failures come back as `AdminError`s with Kafka's names
(SECURITY_DISABLED when the broker has no authorizer, CLUSTER_AUTHORIZATION_FAILED without ALTER or DESCRIBE on
the cluster, INVALID_REQUEST for a binding Kafka refuses).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from bus.client.admin.common import AdminCalls, AdminError, check_error, finish, first_error
from bus.security.acls import AclBinding, AclBindingFilter, AclOperation, PatternType, PermissionType, ResourceType

DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31

# Every ACL (Java's AclBindingFilter.ANY).
ANY_ACL = AclBindingFilter(ResourceType.ANY, None, PatternType.ANY, None, None, AclOperation.ANY, PermissionType.ANY)


def _filter_fields(acl_filter: AclBindingFilter) -> dict[str, Any]:
    """A filter as DescribeAclsRequest and DeleteAclsFilter carry it (the same fields in both)."""
    return {"resource_type_filter": acl_filter.resource_type, "resource_name_filter": acl_filter.resource_name,
            "pattern_type_filter": acl_filter.pattern_type, "principal_filter": acl_filter.principal,
            "host_filter": acl_filter.host, "operation": acl_filter.operation,
            "permission_type": acl_filter.permission}


def _binding(resource: Any, acl: Any) -> AclBinding:
    """A binding from a DescribeAcls resource and one of its ACLs, or from a DeleteAcls matching ACL (both)."""
    return AclBinding.of(resource.resource_type, resource.resource_name, resource.pattern_type, acl.principal,
                         acl.host, acl.operation, acl.permission_type)


class AclAdmin:
    """The ACL calls `AdminClient` inherits."""

    def create_acls(self: AdminCalls, acls: Iterable[AclBinding], *,
                    raise_on_error: bool = True) -> dict[AclBinding, AdminError | None]:
        """Create each binding (one that exists already is left as it is); binding -> None or its error."""
        bindings = list(dict.fromkeys(acls))
        if not bindings:
            return {}

        def build(s: Any) -> Any:
            return s.make("CreateAclsRequest", creations=[s.make(
                "AclCreation", resource_type=b.resource_type, resource_name=b.resource_name,
                resource_pattern_type=b.pattern_type, principal=b.principal, host=b.host, operation=b.operation,
                permission_type=b.permission) for b in bindings])

        def attempt() -> dict[AclBinding, AdminError | None]:
            response = self._send(self._any_node(), CREATE_ACLS, build)
            return {binding: AdminError.of(r.error_code, r.error_message) if r.error_code else None
                    for binding, r in zip(bindings, response.results, strict=True)}

        return finish(self._call(attempt, "create acls"), raise_on_error)

    def describe_acls(self: AdminCalls, acl_filter: AclBindingFilter = ANY_ACL) -> list[AclBinding]:
        """The bindings `acl_filter` matches (every ACL by default)."""

        def attempt() -> list[AclBinding]:
            response = self._send(self._any_node(), DESCRIBE_ACLS,
                                  lambda s: s.make("DescribeAclsRequest", **_filter_fields(acl_filter)))
            check_error(response.error_code, response.error_message)
            return [_binding(resource, acl) for resource in response.resources for acl in resource.acls]

        return self._call(attempt, "describe acls")

    def delete_acls(self: AdminCalls, filters: Iterable[AclBindingFilter], *,
                    raise_on_error: bool = True) -> dict[AclBindingFilter, list[AclBinding]]:
        """Delete every binding each filter matches; filter -> the bindings it deleted. A failed filter raises (with
        `raise_on_error`, the first failure, carrying all of them in `errors`) or is left out of the result."""
        wanted = list(dict.fromkeys(filters))
        if not wanted:
            return {}

        def build(s: Any) -> Any:
            return s.make("DeleteAclsRequest", filters=[s.make("DeleteAclsFilter", **_filter_fields(f))
                                                        for f in wanted])

        def attempt() -> tuple[dict[AclBindingFilter, list[AclBinding]], dict[AclBindingFilter, AdminError | None]]:
            response = self._send(self._any_node(), DELETE_ACLS, build)
            deleted: dict[AclBindingFilter, list[AclBinding]] = {}
            errors: dict[AclBindingFilter, AdminError | None] = {}
            for acl_filter, result in zip(wanted, response.filter_results, strict=True):
                failed = [(m.error_code, m.error_message) for m in result.matching_acls if m.error_code]
                code, message = (result.error_code, result.error_message) if result.error_code else \
                    failed[0] if failed else (0, None)
                if code:
                    errors[acl_filter] = AdminError.of(code, message)
                else:
                    deleted[acl_filter] = [_binding(m, m) for m in result.matching_acls]
            return deleted, errors

        deleted, errors = self._call(attempt, "delete acls")
        failure = first_error(errors)
        if failure is not None and raise_on_error:
            raise failure
        return deleted
