"""CreateAcls (30): add ACLs, each as its own metadata record with its own id.

Needs ALTER on the cluster (CLUSTER_AUTHORIZATION_FAILED on every creation); without an authorizer SECURITY_DISABLED,
as Kafka answers. The active controller validates and commits them (a node of a quorum that is not forwards the
request with the client's principal); the answer waits for the commit, as every metadata change does. An ACL that
exists already succeeds without a second copy; one Kafka refuses fails alone with INVALID_REQUEST.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.context import RequestContext
from bus.controller.controller import ControllerError
from bus.security.acls import AclBinding, AclOperation

API_KEY = 30
MIN_VERSION = 1  # v0 was removed in Kafka 4.0 (KIP-896)
MAX_VERSION = 3


def handle(ctx: RequestContext, request: Any) -> Any:
    if not ctx.authorize_cluster(AclOperation.ALTER):
        return ctx.error_response(request, ErrorCode.cluster_authorization_failed)
    if ctx.authorizer is None:
        return ctx.error_response(request, ErrorCode.security_disabled, "No Authorizer is configured.")
    acls = [AclBinding.of(c.resource_type, c.resource_name, c.resource_pattern_type, c.principal, c.host,
                          c.operation, c.permission_type) for c in request.creations]
    try:
        results: list[ControllerError | None] = ctx.controller.create_acls(acls)
    except ControllerError as exc:
        return ctx.error_response(request, exc.code, exc.message)
    return ctx.make("CreateAclsResponse", throttle_time=0, results=[
        ctx.make("AclCreationResult", error_code=ErrorCode.none if error is None else error.code,
                 error_message=None if error is None else error.message)
        for error in results])
