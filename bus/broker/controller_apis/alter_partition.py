"""AlterPartition (56): a partition leader asks the active controller to change the partition's ISR.

Versions 2 and 3 (topics by id; v3 names each ISR member with its broker epoch, which is not checked: brokers send
-1, "no check", as Kafka allows). Each partition is checked and changed by `QuorumController.alter_partition`
(Kafka's errors: UNKNOWN_TOPIC_ID, FENCED_LEADER_EPOCH, INVALID_UPDATE_VERSION, INELIGIBLE_REPLICA, ...) and
answered with its new state only once the change is committed (KafkaApis awaits the log's sync for every request
that appended; a change that cannot commit answers NOT_CONTROLLER in every error field, which the leader retries).
A node that is not the active controller answers NOT_CONTROLLER at the top. Only partition leaders ask: it needs
CLUSTER_ACTION on the cluster (CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.context import RequestContext
from bus.controller.controller import ControllerError
from bus.security.acls import AclOperation

API_KEY = 56
MIN_VERSION = 2
MAX_VERSION = 3


def _new_isr(partition: Any) -> list[int]:
    with_epochs = getattr(partition, "new_isr_with_epochs", None)
    if with_epochs is not None:
        return [int(member.broker_id) for member in with_epochs]
    return [int(member) for member in partition.new_isr]


def _partition(ctx: RequestContext, broker_id: int, topic_id: Any, partition: Any) -> Any:
    try:
        state = ctx.controller.alter_partition(broker_id, topic_id, partition.partition_index, partition.leader_epoch,
                                               partition.partition_epoch, _new_isr(partition))
    except ControllerError as exc:
        return ctx.make("PartitionData", partition_index=partition.partition_index, error_code=exc.code,
                        leader_id=-1, leader_epoch=-1, isr=(), leader_recovery_state=0, partition_epoch=-1)
    return ctx.make("PartitionData", partition_index=partition.partition_index, error_code=ErrorCode.none,
                    leader_id=state.leader, leader_epoch=state.leader_epoch, isr=tuple(state.isr),
                    leader_recovery_state=0, partition_epoch=state.partition_epoch)


def handle(ctx: RequestContext, request: Any) -> Any:
    if not ctx.authorize_cluster(AclOperation.CLUSTER_ACTION):
        return ctx.error_response(request, ErrorCode.cluster_authorization_failed)
    if not ctx.controller.active:
        return ctx.make("AlterPartitionResponse", throttle_time=0, error_code=ErrorCode.not_controller, topics=())
    topics = [ctx.make("TopicData", topic_id=topic.topic_id,
                       partitions=tuple(_partition(ctx, request.broker_id, topic.topic_id, p)
                                        for p in topic.partitions))
              for topic in request.topics]
    return ctx.make("AlterPartitionResponse", throttle_time=0, error_code=ErrorCode.none, topics=tuple(topics))
