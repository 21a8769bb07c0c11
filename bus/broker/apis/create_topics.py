"""CreateTopics (19): create topics through the controller, or only validate them (validate_only).

Every topic succeeds or fails on its own, with Kafka's error codes and messages. From v5 a
successful result also describes the topic (partitions, replication factor, effective configs), so
clients need no second round trip; validate_only answers with what the topic *would* look like.

Authorization (Kafka's ControllerApis.createTopics): CREATE on the cluster allows every topic, else each topic needs
CREATE on itself (TOPIC_AUTHORIZATION_FAILED, "Authorization failed."); a created topic's configs are described only
with DESCRIBE_CONFIGS on it (else `topic_config_error_code` TOPIC_AUTHORIZATION_FAILED, no configs).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.apis._common import NULL_TOPIC_ID, flag_duplicates, topic_config_entries
from bus.broker.context import RequestContext
from bus.controller.controller import ControllerError, QuorumController, TopicSpec
from bus.security.acls import AclOperation, ResourceType

API_KEY = 19
MIN_VERSION = 2
MAX_VERSION = 7


def _spec(topic: Any) -> TopicSpec:
    """The controller's view of one requested topic; rejects what the wire format allows but Kafka refuses."""
    configs: dict[str, str] = {}
    for config in topic.configs:
        if config.value is None:
            raise ControllerError(
                ErrorCode.invalid_config, f"Null value not supported for topic configs: {config.name}"
            )
        configs[config.name] = config.value
    assignments: dict[int, Sequence[int]] = {}
    for assignment in topic.assignments:
        if assignment.partition_index in assignments:
            raise ControllerError(
                ErrorCode.invalid_replica_assignment,
                f"Partition {assignment.partition_index} is assigned more than once.",
            )
        assignments[assignment.partition_index] = list(assignment.broker_ids)
    return TopicSpec(
        name=topic.name,
        num_partitions=topic.num_partitions,
        replication_factor=topic.replication_factor,
        assignments=assignments or None,
        configs=configs,
    )


def _planned_shape(controller: QuorumController, spec: TopicSpec) -> tuple[int, int]:
    """(partitions, replication factor) a validated spec creates, with -1 replaced by the defaults."""
    if spec.assignments:
        return len(spec.assignments), len(next(iter(spec.assignments.values())))
    partitions = controller.default_partitions if spec.num_partitions == -1 else spec.num_partitions
    factor = controller.default_replication_factor if spec.replication_factor == -1 else spec.replication_factor
    return partitions, factor


def _success(ctx: RequestContext, spec: TopicSpec, validate_only: bool, describable: bool) -> Any:
    controller = ctx.controller
    created = controller.create_topic(spec, validate_only=validate_only)
    if created is None:
        topic_id = NULL_TOPIC_ID  # Kafka reports no id for a topic it did not create
        partitions, factor = _planned_shape(controller, spec)
        overrides = dict(spec.configs or {})
    else:
        topic_id = created.topic_id
        partitions = len(created.partitions)
        factor = len(created.partitions[0].replicas)
        overrides = created.configs
    configs = []
    if ctx.shapes.has("CreatableTopicConfigs") and describable:  # v5+ describes the topic it created
        configs = [
            ctx.make(
                "CreatableTopicConfigs",
                name=e.name,
                value=e.value,
                read_only=e.read_only,
                config_source=e.source,
                is_sensitive=e.sensitive,
            )
            for e in topic_config_entries(overrides, ctx.config.static_topic_defaults())
        ]
    return ctx.make(
        "CreatableTopicResult",
        name=spec.name,
        topic_id=topic_id,
        error_code=ErrorCode.none,
        error_message=None,
        num_partitions=partitions,
        replication_factor=factor,
        configs=configs,
        topic_config_error_code=ErrorCode.none if describable else ErrorCode.topic_authorization_failed,
    )


def _failure(ctx: RequestContext, name: str, code: ErrorCode, message: str | None) -> Any:
    return ctx.make(
        "CreatableTopicResult",
        name=name,
        topic_id=NULL_TOPIC_ID,
        error_code=code,
        error_message=message,
        num_partitions=-1,
        replication_factor=-1,
        configs=(),
    )


def handle(ctx: RequestContext, request: Any) -> Any:
    names = {topic.name for topic in request.topics}
    if ctx.authorize_cluster(AclOperation.CREATE, log_if_denied=False):
        creatable = names
    else:
        creatable = ctx.authorized(AclOperation.CREATE, ResourceType.TOPIC, names)
    describable = ctx.authorized(AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, names, log_if_denied=False)
    results = []
    for topic, repeated in flag_duplicates(request.topics, lambda t: t.name):
        if repeated:
            results.append(_failure(ctx, topic.name, ErrorCode.invalid_request, "Duplicate topic name."))
            continue
        if topic.name not in creatable:
            results.append(_failure(ctx, topic.name, ErrorCode.topic_authorization_failed, "Authorization failed."))
            continue
        try:
            results.append(_success(ctx, _spec(topic), request.validate_only, topic.name in describable))
        except ControllerError as exc:
            results.append(_failure(ctx, topic.name, exc.code, exc.message))
    return ctx.make("CreateTopicsResponse", throttle_time=0, topics=results)
