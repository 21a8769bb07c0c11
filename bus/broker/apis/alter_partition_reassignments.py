"""AlterPartitionReassignments (45): move partitions to new replica sets, or cancel a move (KIP-455).

Per partition a target replica list, or null to cancel the reassignment under way; v1 adds
`allow_replication_factor_change` (KIP-860: false refuses a target of another size). The active controller validates
and starts each move, all in one metadata entry, and the answer goes out once that is committed (KafkaApis awaits the
metadata log, as for every admin change; `timeout_ms` bounds nothing more, as for the other admin APIs here). The
moves themselves complete later, when the target replicas are in sync: ListPartitionReassignments shows them until
then. On a node of a quorum that is not the active controller the request is forwarded (KIP-590); one the controller
refuses as a whole (the leadership lost) gets that error at the top level, as Kafka answers. Needs ALTER on the cluster
(CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.context import RequestContext
from bus.controller.controller import ControllerError
from bus.security.acls import AclOperation

API_KEY = 45
MIN_VERSION = 0
MAX_VERSION = 1


def _wanted(request: Any) -> dict[str, dict[int, list[int] | None]]:
    """topic -> partition -> target replicas (None: cancel); a partition named twice takes its last target."""
    wanted: dict[str, dict[int, list[int] | None]] = {}
    for topic in request.topics:
        partitions = wanted.setdefault(topic.name, {})
        for partition in topic.partitions:
            replicas = partition.replicas
            partitions[int(partition.partition_index)] = None if replicas is None else [int(r) for r in replicas]
    return wanted


def _response(ctx: RequestContext, results: Mapping[str, Mapping[int, ControllerError | None]], allow: bool,
              failure: ControllerError | None = None) -> Any:
    topics = [
        ctx.make("ReassignableTopicResponse", name=name, partitions=[
            ctx.make("ReassignablePartitionResponse", partition_index=partition,
                     error_code=ErrorCode.none if error is None else error.code,
                     error_message=None if error is None else error.message)
            for partition, error in partitions.items()])
        for name, partitions in results.items()
    ]
    return ctx.make("AlterPartitionReassignmentsResponse", throttle_time=0,
                    error_code=ErrorCode.none if failure is None else failure.code,
                    error_message=None if failure is None else failure.message, responses=topics,
                    allow_replication_factor_change=allow)


def handle(ctx: RequestContext, request: Any) -> Any:
    wanted = _wanted(request)
    allow = bool(getattr(request, "allow_replication_factor_change", True))  # v0: always allowed
    if not ctx.authorize_cluster(AclOperation.ALTER):
        return ctx.error_response(request, ErrorCode.cluster_authorization_failed)
    try:
        results = ctx.controller.alter_partition_reassignments(wanted, allow)
    except ControllerError as exc:
        return _response(ctx, {}, allow, exc)
    return _response(ctx, results, allow)
