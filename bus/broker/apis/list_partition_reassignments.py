"""ListPartitionReassignments (46): the partitions being moved, with their replicas and the replicas being added
and removed (KIP-455).

`topics` null lists every move under way; named topics and partitions that do not exist or are not moving are
left out, as Kafka's ReplicationControlManager answers. Answered by the active controller, which has every move it
started (on a node of a quorum that is not, the request is forwarded, KIP-590). Needs DESCRIBE on the cluster
(CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.context import RequestContext
from bus.controller.controller import ControllerError
from bus.security.acls import AclOperation

API_KEY = 46
MIN_VERSION = 0
MAX_VERSION = 0


def handle(ctx: RequestContext, request: Any) -> Any:
    if not ctx.authorize_cluster(AclOperation.DESCRIBE):
        return ctx.error_response(request, ErrorCode.cluster_authorization_failed)
    wanted: dict[str, list[int]] | None = None
    if request.topics is not None:
        wanted = {}
        for topic in request.topics:
            wanted.setdefault(topic.name, []).extend(int(p) for p in topic.partition_indexes)
    try:
        moving = ctx.controller.list_partition_reassignments(wanted)
    except ControllerError as exc:
        return ctx.make("ListPartitionReassignmentsResponse", throttle_time=0, error_code=exc.code,
                        error_message=exc.message, topics=[])
    topics = [
        ctx.make("OngoingTopicReassignment", name=name, partitions=[
            ctx.make("OngoingPartitionReassignment", partition_index=partition, replicas=state.replicas,
                     adding_replicas=state.adding_replicas, removing_replicas=state.removing_replicas)
            for partition, state in partitions.items()])
        for name, partitions in moving.items()
    ]
    return ctx.make("ListPartitionReassignmentsResponse", throttle_time=0, error_code=ErrorCode.none,
                    error_message=None, topics=topics)
