"""AlterUserScramCredentials (51): add, replace and delete users' SCRAM credentials (KIP-554).

The client sends salted passwords (Hi(password, salt, iterations)), never passwords; the active controller checks
each change as Kafka's ScramControlManager does and commits the credentials (salt, StoredKey, ServerKey,
iterations) to the metadata log, so every broker's SASL servers see them once committed and they survive restarts.
A node of a quorum that is not the active controller forwards the request to it (KIP-590); the answer waits for
the commit. Needs ALTER on the cluster (CLUSTER_AUTHORIZATION_FAILED for every user otherwise).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.context import RequestContext
from bus.controller.controller import ControllerError, ScramUpsertion
from bus.security.acls import AclOperation

API_KEY = 51
MIN_VERSION = MAX_VERSION = 0


def handle(ctx: RequestContext, request: Any) -> Any:
    if not ctx.authorize_cluster(AclOperation.ALTER):
        return ctx.error_response(request, ErrorCode.cluster_authorization_failed)
    deletions = [(deletion.name, deletion.mechanism) for deletion in request.deletions]
    upsertions = [ScramUpsertion(u.name, u.mechanism, u.iterations, u.salt, u.salted_password)
                  for u in request.upsertions]
    try:
        results = ctx.controller.alter_user_scram_credentials(deletions, upsertions)
    except ControllerError as exc:
        return ctx.error_response(request, exc.code, exc.message)
    return ctx.make("AlterUserScramCredentialsResponse", throttle_time=0, results=[
        ctx.make("AlterUserScramCredentialsResult", user=user,
                 error_code=ErrorCode.none if error is None else error.code,
                 error_message=None if error is None else error.message)
        for user, error in results])
