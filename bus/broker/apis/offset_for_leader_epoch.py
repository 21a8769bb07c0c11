"""OffsetForLeaderEpoch (23): where a leader epoch ends in the leader's log (KIP-101/279, KIP-320).

A follower asks for the end of its latest epoch and truncates what it holds past it; a consumer asks for the
end of the epoch of its position after a leader change, and finds its position lost if the answer is below
it. Per partition, as Kafka's ReplicaManager.lastOffsetForLeaderEpoch: UNKNOWN_TOPIC_OR_PARTITION for a
partition the cluster does not have, NOT_LEADER_OR_FOLLOWER unless this broker leads it, FENCED_LEADER_EPOCH
/ UNKNOWN_LEADER_EPOCH when `current_leader_epoch` is older / newer than ours, else the leader-epoch cache's
answer, with leader epoch and end offset -1 when it has none. Kafka serves this from the leader only, for
consumers (replica_id -1) and followers alike, whatever replica_id says; so does this.

Authorization: CLUSTER_ACTION on the cluster (a follower) allows every topic; else each topic needs DESCRIBE
(a consumer, KIP-320), TOPIC_AUTHORIZATION_FAILED on its partitions otherwise.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.context import RequestContext
from bus.broker.partition import PartitionError
from bus.security.acls import AclOperation, ResourceType

API_KEY = 23
MIN_VERSION = 2  # v0-v1 were removed in Kafka 4.0 (KIP-896); kio has v2-v4
MAX_VERSION = 4


def _end_offset(ctx: RequestContext, topic: str, wanted: Any) -> tuple[int, int]:
    """(leader epoch, end offset) of one partition, or PartitionError."""
    image = ctx.metadata.topics.get(topic)
    state = image.partitions.get(wanted.partition) if image is not None else None
    if state is None:
        raise PartitionError(ErrorCode.unknown_topic_or_partition)
    try:
        partition = ctx.replicas.get(topic, wanted.partition)
    except PartitionError:
        raise PartitionError(ErrorCode.not_leader_or_follower) from None  # in the cluster, not hosted here
    partition.check_leader_epoch(wanted.current_leader_epoch)
    if state.leader != ctx.node_id:
        raise PartitionError(ErrorCode.not_leader_or_follower)
    return partition.end_offset_for_epoch(wanted.leader_epoch)


def handle(ctx: RequestContext, request: Any) -> Any:
    names = [topic.topic for topic in request.topics]
    if ctx.authorize_cluster(AclOperation.CLUSTER_ACTION, log_if_denied=False):
        describable = set(names)
    else:
        describable = ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, names)
    topics = []
    for topic in request.topics:
        partitions = []
        for wanted in topic.partitions:
            try:
                if topic.topic not in describable:
                    raise PartitionError(ErrorCode.topic_authorization_failed)
                epoch, end_offset = _end_offset(ctx, topic.topic, wanted)
                code = ErrorCode.none
            except PartitionError as exc:
                epoch, end_offset, code = -1, -1, exc.code
            partitions.append(ctx.make("EpochEndOffset", error_code=code, partition=wanted.partition,
                                       leader_epoch=epoch, end_offset=end_offset))  # fmt: skip
        topics.append(ctx.make("OffsetForLeaderTopicResult", topic=topic.topic, partitions=partitions))
    return ctx.make("OffsetForLeaderEpochResponse", throttle_time=0, topics=topics)
