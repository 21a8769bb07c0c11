"""DescribeProducers (61): the idempotent/transactional producers a partition remembers (KIP-664).

Each topic needs READ (TOPIC_AUTHORIZATION_FAILED on its partitions), as Kafka checks it.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.context import RequestContext
from bus.broker.partition import PartitionError
from bus.security.acls import AclOperation, ResourceType

API_KEY = 61
MIN_VERSION = 0
MAX_VERSION = 0


def handle(ctx: RequestContext, request: Any) -> Any:
    readable = ctx.authorized(AclOperation.READ, ResourceType.TOPIC, (t.name for t in request.topics))
    topics = []
    for topic in request.topics:
        partitions = []
        for index in topic.partition_indexes:
            try:
                if topic.name not in readable:
                    raise PartitionError(ErrorCode.topic_authorization_failed)
                partition = ctx.replicas.get(topic.name, index)
            except PartitionError as exc:
                partitions.append(ctx.make("PartitionResponse", partition_index=index, error_code=exc.code,
                                           active_producers=()))
                continue
            active = [
                ctx.make("ProducerState", producer_id=e.producer_id, producer_epoch=e.epoch,
                         last_sequence=e.last_seq, last_timestamp=e.last_timestamp,
                         coordinator_epoch=e.coordinator_epoch,
                         current_txn_start_offset=-1 if e.txn_first_offset is None else e.txn_first_offset)
                for e in partition.producers.producers.values()
            ]
            partitions.append(ctx.make("PartitionResponse", partition_index=index, error_code=ErrorCode.none,
                                       active_producers=active))
        topics.append(ctx.make("TopicResponse", name=topic.name, partitions=partitions))
    return ctx.make("DescribeProducersResponse", throttle_time=0, topics=topics)
