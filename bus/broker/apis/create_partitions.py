"""CreatePartitions (37): grow topics to a new partition count, optionally with explicit replicas.

Partitions can only be added (Kafka never shrinks a topic: keys would move between partitions
under existing data). The controller validates the count and the assignment. Each topic needs ALTER
(TOPIC_AUTHORIZATION_FAILED otherwise).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.apis._common import flag_duplicates
from bus.broker.context import RequestContext
from bus.controller.controller import ControllerError
from bus.security.acls import AclOperation, ResourceType

API_KEY = 37
MIN_VERSION = 0
MAX_VERSION = 3


def handle(ctx: RequestContext, request: Any) -> Any:
    controller = ctx.controller
    alterable = ctx.authorized(AclOperation.ALTER, ResourceType.TOPIC, {t.name for t in request.topics})
    results = []
    for topic, repeated in flag_duplicates(request.topics, lambda t: t.name):
        code, message = ErrorCode.none, None
        try:
            if repeated:
                raise ControllerError(ErrorCode.invalid_request, "Duplicate topic name.")
            if topic.name not in alterable:
                raise ControllerError(ErrorCode.topic_authorization_failed)
            assignments = None if topic.assignments is None else [a.broker_ids for a in topic.assignments]
            controller.create_partitions(topic.name, topic.count, assignments, validate_only=request.validate_only)
        except ControllerError as exc:
            code, message = exc.code, exc.message
        results.append(ctx.make("CreatePartitionsTopicResult", name=topic.name, error_code=code,
                                error_message=message))
    return ctx.make("CreatePartitionsResponse", throttle_time=0, results=results)
