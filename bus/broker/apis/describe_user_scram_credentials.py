"""DescribeUserScramCredentials (50): which SCRAM mechanisms, with how many iterations, users have credentials for.

Answered from this node's committed metadata image (KIP-554; never a salt or a key), as Kafka's KRaft brokers
answer it from their metadata cache: every user when the request names none, else each named user, with
RESOURCE_NOT_FOUND for one without credentials and DUPLICATE_RESOURCE for one named twice, in Kafka's words. Needs
DESCRIBE on the cluster (CLUSTER_AUTHORIZATION_FAILED otherwise).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.context import RequestContext
from bus.security.acls import AclOperation
from bus.security.scram import SCRAM_MECHANISMS

API_KEY = 50
MIN_VERSION = MAX_VERSION = 0


def handle(ctx: RequestContext, request: Any) -> Any:
    if not ctx.authorize_cluster(AclOperation.DESCRIBE):
        return ctx.error_response(request, ErrorCode.cluster_authorization_failed)
    mechanisms: dict[str, list[tuple[int, int]]] = {}  # user -> (mechanism type, iterations)
    for (mechanism, user), credential in ctx.controller.image.scram_credentials.items():
        mechanisms.setdefault(user, []).append((SCRAM_MECHANISMS[mechanism].type, credential.iterations))
    named = Counter(user.name for user in request.users or ())
    results = [_result(ctx, user, named[user] if named else 1, mechanisms.get(user))
               for user in (named or sorted(mechanisms))]
    return ctx.make("DescribeUserScramCredentialsResponse", throttle_time=0, error_code=ErrorCode.none,
                    error_message=None, results=results)


def _result(ctx: RequestContext, user: str, times_named: int, credentials: list[tuple[int, int]] | None) -> Any:
    if times_named > 1:
        return ctx.make("DescribeUserScramCredentialsResult", user=user, error_code=ErrorCode.duplicate_resource,
                        error_message=f"Cannot describe SCRAM credentials for the same user twice in a single "
                                      f"request: {user}", credential_infos=())
    if credentials is None:
        return ctx.make("DescribeUserScramCredentialsResult", user=user, error_code=ErrorCode.resource_not_found,
                        error_message=f"Attempt to describe a user credential that does not exist: {user}",
                        credential_infos=())
    return ctx.make("DescribeUserScramCredentialsResult", user=user, error_code=ErrorCode.none, error_message=None,
                    credential_infos=[ctx.make("CredentialInfo", mechanism=mechanism, iterations=iterations)
                                      for mechanism, iterations in sorted(credentials)])
