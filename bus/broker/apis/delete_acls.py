"""DeleteAcls (31): remove the ACLs each filter matches, answering per filter which ones it removed.

Needs ALTER on the cluster (CLUSTER_AUTHORIZATION_FAILED on every filter); without an authorizer SECURITY_DISABLED,
as Kafka answers. The active controller commits the removals (a node of a quorum that is not forwards the request
with the client's principal); the answer waits for the commit. A filter with an UNKNOWN part fails alone with
INVALID_REQUEST. Filters may use pattern type MATCH (every ACL that applies to the named resource) and ANY.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.context import RequestContext
from bus.controller.controller import ControllerError
from bus.security.acls import AclBinding, AclBindingFilter, AclOperation

API_KEY = 31
MIN_VERSION = 1  # v0 was removed in Kafka 4.0 (KIP-896)
MAX_VERSION = 3


def _result(ctx: RequestContext, outcome: list[AclBinding] | ControllerError) -> Any:
    if isinstance(outcome, ControllerError):
        return ctx.make("DeleteAclsFilterResult", error_code=outcome.code, error_message=outcome.message,
                        matching_acls=())
    return ctx.make("DeleteAclsFilterResult", error_code=ErrorCode.none, error_message=None, matching_acls=[
        ctx.make("DeleteAclsMatchingAcl", error_code=ErrorCode.none, error_message=None,
                 resource_type=acl.resource_type, resource_name=acl.resource_name, pattern_type=acl.pattern_type,
                 principal=acl.principal, host=acl.host, operation=acl.operation, permission_type=acl.permission)
        for acl in outcome])


def handle(ctx: RequestContext, request: Any) -> Any:
    if not ctx.authorize_cluster(AclOperation.ALTER):
        return ctx.error_response(request, ErrorCode.cluster_authorization_failed)
    if ctx.authorizer is None:
        return ctx.error_response(request, ErrorCode.security_disabled, "No Authorizer is configured.")
    filters = [AclBindingFilter.of(f.resource_type_filter, f.resource_name_filter, f.pattern_type_filter,
                                   f.principal_filter, f.host_filter, f.operation, f.permission_type)
               for f in request.filters]
    try:
        outcomes = ctx.controller.delete_acls(filters)
    except ControllerError as exc:
        return ctx.error_response(request, exc.code, exc.message)
    return ctx.make("DeleteAclsResponse", throttle_time=0, filter_results=[_result(ctx, o) for o in outcomes])
