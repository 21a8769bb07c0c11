"""ElectLeaders (43): preferred or unclean leader elections, run by the active controller.

v0 always elects the preferred replica; v1 adds `election_type` (0 PREFERRED, 1 UNCLEAN) and a top-level error
code; v2 is flexible. `topic_partitions` null means every partition, and then partitions that need no election are
not reported (Kafka's answer). On a node of a quorum that is not the active controller the request is forwarded
(KIP-590); the answer goes out once the elections are committed, as for every admin change (KafkaApis awaits the
metadata log), and a request the controller refuses as a whole (an unknown election type, the leadership lost)
gets that error on every partition it named. Needs ALTER on the cluster (CLUSTER_AUTHORIZATION_FAILED, the same
way).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.context import RequestContext
from bus.controller.controller import ControllerError
from bus.controller.replication_control import PREFERRED
from bus.security.acls import AclOperation

API_KEY = 43
MIN_VERSION = 0
MAX_VERSION = 2


def _wanted(request: Any) -> dict[str, list[int]] | None:
    """topic -> partitions asked for (a topic named twice gets its partitions merged), or None for all."""
    if request.topic_partitions is None:
        return None
    wanted: dict[str, list[int]] = {}
    for topic in request.topic_partitions:
        wanted.setdefault(topic.topic, []).extend(int(p) for p in topic.partitions)
    return wanted


def _response(ctx: RequestContext, results: Mapping[str, Mapping[int, ControllerError | None]],
              error: ErrorCode = ErrorCode.none) -> Any:
    topics = [
        ctx.make("ReplicaElectionResult", topic=name, partition_result=[
            ctx.make("PartitionResult", partition_id=partition,
                     error_code=ErrorCode.none if failure is None else failure.code,
                     error_message=None if failure is None else failure.message)
            for partition, failure in partitions.items()])
        for name, partitions in results.items()
    ]
    return ctx.make("ElectLeadersResponse", throttle_time=0, error_code=error, replica_election_results=topics)


def handle(ctx: RequestContext, request: Any) -> Any:
    wanted = _wanted(request)
    election_type = int(getattr(request, "election_type", PREFERRED))  # v0 has none: preferred
    try:
        if not ctx.authorize_cluster(AclOperation.ALTER):
            raise ControllerError(ErrorCode.cluster_authorization_failed)
        results = ctx.controller.elect_leaders(election_type, wanted)
    except ControllerError as exc:
        refused = {name: dict.fromkeys(partitions, exc) for name, partitions in (wanted or {}).items()}
        return _response(ctx, refused, exc.code)
    return _response(ctx, results)
