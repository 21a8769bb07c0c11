"""DescribeAcls (29): the ACLs a filter matches, grouped by resource pattern.

Needs DESCRIBE on the cluster (CLUSTER_AUTHORIZATION_FAILED); without an authorizer there are no ACLs to list
(SECURITY_DISABLED), as Kafka answers. Answered by any broker from its own authorizer, which holds the committed
ACLs of the metadata log. A filter with an UNKNOWN part is answered INVALID_REQUEST (Kafka refuses to parse it).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.context import RequestContext
from bus.security.acls import AclBinding, AclBindingFilter, AclOperation, InvalidAcl

API_KEY = 29
MIN_VERSION = 1  # v0 was removed in Kafka 4.0 (KIP-896)
MAX_VERSION = 3


def _resources(ctx: RequestContext, acls: list[AclBinding]) -> list[Any]:
    by_pattern: dict[tuple[int, str, int], list[AclBinding]] = {}
    for acl in acls:
        by_pattern.setdefault((acl.resource_type, acl.resource_name, acl.pattern_type), []).append(acl)
    return [
        ctx.make("DescribeAclsResource", resource_type=resource_type, resource_name=name, pattern_type=pattern_type,
                 acls=[ctx.make("AclDescription", principal=acl.principal, host=acl.host, operation=acl.operation,
                                permission_type=acl.permission)
                       for acl in sorted(entries, key=lambda a: (a.principal, a.host, a.operation, a.permission))])
        for (resource_type, name, pattern_type), entries in sorted(by_pattern.items())
    ]


def handle(ctx: RequestContext, request: Any) -> Any:
    if not ctx.authorize_cluster(AclOperation.DESCRIBE):
        return ctx.error_response(request, ErrorCode.cluster_authorization_failed)
    authorizer = ctx.authorizer
    if authorizer is None:
        return ctx.error_response(request, ErrorCode.security_disabled, "No Authorizer is configured on the broker")
    acl_filter = AclBindingFilter.of(request.resource_type_filter, request.resource_name_filter,
                                     request.pattern_type_filter, request.principal_filter, request.host_filter,
                                     request.operation, request.permission_type)
    try:
        acl_filter.validate()
    except InvalidAcl as exc:
        return ctx.error_response(request, ErrorCode.invalid_request, str(exc))
    return ctx.make("DescribeAclsResponse", throttle_time=0, error_code=ErrorCode.none, error_message=None,
                    resources=_resources(ctx, authorizer.acls(acl_filter)))
