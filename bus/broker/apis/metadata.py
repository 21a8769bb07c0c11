"""Metadata (3): brokers, topics and partition leaders; auto-creates topics when allowed."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.apis._common import NULL_TOPIC_ID, advertised_endpoint, topic_name_for
from bus.broker.context import RequestContext
from bus.controller.controller import ControllerError, TopicSpec
from bus.controller.image import TopicImage

API_KEY = 3
MIN_VERSION = 0
MAX_VERSION = 12


def _topic(ctx: RequestContext, topic: TopicImage) -> Any:
    partitions = [
        ctx.make(
            "MetadataResponsePartition",
            error_code=ErrorCode.none,
            partition_index=state.partition,
            leader_id=state.leader,
            leader_epoch=state.leader_epoch,
            replica_nodes=state.replicas,
            isr_nodes=state.isr,
            offline_replicas=(),
        )
        for state in sorted(topic.partitions.values(), key=lambda s: s.partition)
    ]
    return ctx.make(
        "MetadataResponseTopic",
        error_code=ErrorCode.none,
        name=topic.name,
        topic_id=topic.topic_id,
        is_internal=topic.internal,
        partitions=partitions,
    )


def _error_topic(ctx: RequestContext, name: str | None, code: ErrorCode, topic_id: Any = None) -> Any:
    return ctx.make("MetadataResponseTopic", error_code=code, name=name, topic_id=topic_id or NULL_TOPIC_ID,
                    partitions=())


def _auto_create(ctx: RequestContext, name: str) -> TopicImage | ErrorCode:
    try:
        created = ctx.controller.create_topic(TopicSpec(name))
    except ControllerError as exc:
        return exc.code
    assert created is not None
    return created


def handle(ctx: RequestContext, request: Any) -> Any:
    image = ctx.metadata
    endpoint = advertised_endpoint(ctx)
    allow_auto = getattr(request, "allow_auto_topic_creation", True) and ctx.config["auto.create.topics.enable"]
    wanted = request.topics
    if wanted is None or (ctx.api_version == 0 and not wanted):
        topics = [_topic(ctx, t) for t in sorted(image.topics.values(), key=lambda t: t.name)]
    else:
        topics = []
        for entry in wanted:
            topic_id = getattr(entry, "topic_id", None)
            name = topic_name_for(ctx, entry.name, topic_id)
            if name is None:
                topics.append(_error_topic(ctx, None, ErrorCode.unknown_topic_id, topic_id))
                continue
            topic = image.topics.get(name)
            if topic is None and allow_auto and (topic_id is None or topic_id == NULL_TOPIC_ID):
                outcome = _auto_create(ctx, name)
                if isinstance(outcome, ErrorCode):
                    topics.append(_error_topic(ctx, name, outcome))
                    continue
                topic = outcome
            if topic is None:
                topics.append(_error_topic(ctx, name, ErrorCode.unknown_topic_or_partition))
            else:
                topics.append(_topic(ctx, topic))
    brokers = [ctx.make("MetadataResponseBroker", node_id=ctx.node_id, host=endpoint.host, port=endpoint.port,
                        rack=None)]
    return ctx.make(
        "MetadataResponse",
        throttle_time=0,
        brokers=brokers,
        cluster_id=image.cluster_id,
        controller_id=ctx.node_id,
        topics=topics,
    )
