"""Metadata (3): brokers, topics and partition leaders; auto-creates topics when allowed.

A response describing thousands of partitions is built in a worker thread from a snapshot of the image
taken on the loop (building one costs about 10 us per partition; KafkaApis then encodes it off the loop
too): librdkafka asks for a producer's topics on start and on every refresh, and a 1,000-partition answer
built on the loop held every other connection for over 20 ms.

On a node of a quorum the brokers are this one plus every registered broker that is not fenced (at its endpoint
on the listener the request came in on), and `controller_id` is the raft leader while this node reaches it, else
this node, which forwards controller requests (see `controller_id`).

A topic auto-created on a node that is not the active controller is created there (forwarded) and answered
LEADER_NOT_AVAILABLE meanwhile, which clients retry, as Kafka's brokers answer it.

A partition without a leader (-1: every in-sync replica's broker fenced) is listed with LEADER_NOT_AVAILABLE, and
`offline_replicas` names its replicas on brokers that are fenced or not registered, as Kafka's MetadataCache does.

Authorization (Kafka's handleTopicMetadataRequest): a request for every topic lists only those the principal may
DESCRIBE; a topic named without DESCRIBE is answered TOPIC_AUTHORIZATION_FAILED whether it exists or not (by id: with
its id and no name), and one that would be auto-created needs CREATE on the cluster or on the topic
(TOPIC_AUTHORIZATION_FAILED otherwise). Asked for (v8+), each topic carries the operations the principal may do on
it and (v8-v10) the response those on the cluster, 0 without DESCRIBE on it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.apis._common import (
    LARGE_RESPONSE_ITEMS,
    NULL_TOPIC_ID,
    OPERATIONS_NOT_REQUESTED,
    cluster_authorized_operations,
    controller_id,
    live_brokers,
    topic_name_for,
)
from bus.broker.context import RequestContext
from bus.controller.controller import ControllerError, TopicSpec
from bus.controller.election import NO_LEADER
from bus.controller.image import PartitionState, TopicImage
from bus.security.acls import AclOperation, ResourceType

API_KEY = 3
MIN_VERSION = 0
MAX_VERSION = 12


def _topic(ctx: RequestContext, live: frozenset[int], topic: TopicImage, states: Sequence[PartitionState],
           operations: int) -> Any:
    partitions = [
        ctx.make(
            "MetadataResponsePartition",
            error_code=ErrorCode.leader_not_available if state.leader == NO_LEADER else ErrorCode.none,
            partition_index=state.partition,
            leader_id=state.leader,
            leader_epoch=state.leader_epoch,
            replica_nodes=state.replicas,
            isr_nodes=state.isr,
            offline_replicas=[r for r in state.replicas if r not in live],
        )
        for state in states
    ]
    return ctx.make(
        "MetadataResponseTopic",
        error_code=ErrorCode.none,
        name=topic.name,
        topic_id=topic.topic_id,
        is_internal=topic.internal,
        partitions=partitions,
        topic_authorized_operations=operations,
    )


def _error_topic(ctx: RequestContext, name: str | None, code: ErrorCode, topic_id: Any = None) -> Any:
    return ctx.make("MetadataResponseTopic", error_code=code, name=name, topic_id=topic_id or NULL_TOPIC_ID,
                    partitions=())


def _auto_create(ctx: RequestContext, name: str) -> TopicImage | ErrorCode:
    channel = ctx.services.controller_channel
    if channel is not None and not ctx.controller.active:
        channel.create_topic_soon(name, ctx.principal, ctx.peer)
        return ErrorCode.leader_not_available
    try:
        created = ctx.controller.create_topic(TopicSpec(name))
    except ControllerError as exc:
        return exc.code
    assert created is not None
    return created


def _brokers(ctx: RequestContext) -> list[Any]:
    return [ctx.make("MetadataResponseBroker", node_id=b.node_id, host=b.host, port=b.port, rack=b.rack)
            for b in live_brokers(ctx)]


def _named(ctx: RequestContext, wanted: Sequence[Any], allow_auto: bool) -> list[Any]:
    """The topics a request names, each a TopicImage to describe or a finished error entry."""
    image = ctx.metadata
    requested = []  # (name, by id): the name None for an unknown id
    for entry in wanted:
        topic_id = getattr(entry, "topic_id", None)
        requested.append((topic_name_for(ctx, entry.name, topic_id), topic_id))
    describable = ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC,
                                 [name for name, _id in requested if name is not None])
    missing = [name for name, topic_id in requested if name in describable and name not in image.topics
               and (topic_id is None or topic_id == NULL_TOPIC_ID)]
    creatable: set[str] = set()
    if allow_auto and missing:
        creatable = (set(missing) if ctx.authorize_cluster(AclOperation.CREATE, log_if_denied=False)
                     else ctx.authorized(AclOperation.CREATE, ResourceType.TOPIC, missing))
    topics: list[Any] = []
    for name, topic_id in requested:
        if name is None:
            topics.append(_error_topic(ctx, None, ErrorCode.unknown_topic_id, topic_id))
            continue
        by_id = topic_id is not None and topic_id != NULL_TOPIC_ID
        if name not in describable:  # not even whether it exists is told (by id, the id is no secret)
            topics.append(_error_topic(ctx, None, ErrorCode.topic_authorization_failed, topic_id) if by_id
                          else _error_topic(ctx, name, ErrorCode.topic_authorization_failed))
            continue
        topic = image.topics.get(name)
        if topic is None and allow_auto and not by_id:
            if name not in creatable:
                topics.append(_error_topic(ctx, name, ErrorCode.topic_authorization_failed))
                continue
            outcome = _auto_create(ctx, name)
            if isinstance(outcome, ErrorCode):
                topics.append(_error_topic(ctx, name, outcome))
                continue
            topic = outcome
        if topic is None:
            topics.append(_error_topic(ctx, name, ErrorCode.unknown_topic_or_partition))
        else:
            topics.append(topic)
    return topics


def handle(ctx: RequestContext, request: Any) -> Any:
    image = ctx.metadata
    allow_auto = getattr(request, "allow_auto_topic_creation", True) and ctx.config["auto.create.topics.enable"]
    wanted = request.topics
    topics: list[Any]  # a TopicImage to describe, or a finished error entry
    if wanted is None or (ctx.api_version == 0 and not wanted):
        describable = ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, image.topics, log_if_denied=False)
        topics = sorted((t for t in image.topics.values() if t.name in describable), key=lambda t: t.name)
    else:
        topics = _named(ctx, wanted, allow_auto)
    with_operations = getattr(request, "include_topic_authorized_operations", False)
    # The snapshot: which topics, and each one's partition states as they are now (the image replaces a
    # PartitionState on every change, never edits one), so the build may run in a thread.
    described = [(t, sorted(t.partitions.values(), key=lambda s: s.partition),
                  ctx.authorized_operations(ResourceType.TOPIC, t.name) if with_operations
                  else OPERATIONS_NOT_REQUESTED) if isinstance(t, TopicImage) else t
                 for t in topics]
    brokers = _brokers(ctx)
    live = frozenset(image.live_brokers)
    cluster_id = image.cluster_id
    controller = controller_id(ctx)
    cluster_operations = cluster_authorized_operations(ctx, getattr(request, "include_cluster_authorized_operations",
                                                                    False))
    if sum(len(t.partitions) for t in topics if isinstance(t, TopicImage)) > LARGE_RESPONSE_ITEMS:
        return asyncio.to_thread(_response, ctx, described, live, brokers, cluster_id, controller, cluster_operations)
    return _response(ctx, described, live, brokers, cluster_id, controller, cluster_operations)


def _response(ctx: RequestContext, described: list[Any], live: frozenset[int], brokers: list[Any],
              cluster_id: str | None, controller: int, cluster_operations: int) -> Any:
    topics = [_topic(ctx, live, *entry) if isinstance(entry, tuple) else entry for entry in described]
    return ctx.make("MetadataResponse", throttle_time=0, brokers=brokers, cluster_id=cluster_id,
                    controller_id=controller, topics=topics, cluster_authorized_operations=cluster_operations)


def response_items(response: Any) -> int:
    """Partitions in the response: encoding takes about 20 us each, so 1,000 would hold the loop for 20 ms."""
    return sum(len(topic.partitions) for topic in response.topics)
