"""DeleteTopics (20): remove topics by name (v1-5) or by name or id (v6).

The controller commits a remove-topic record; the replica manager then drops the partitions and
deletes their logs. `delete.topic.enable=false` refuses every deletion, as Kafka does.
"""

from __future__ import annotations

import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.apis._common import NULL_TOPIC_ID, flag_duplicates
from bus.broker.context import RequestContext
from bus.controller.controller import ControllerError

API_KEY = 20
MIN_VERSION = 1
MAX_VERSION = 6

TOPIC_ID_VERSION = 6


def _requested(ctx: RequestContext, request: Any) -> list[tuple[str | None, uuid.UUID]]:
    """(name, id) pairs as the client sent them; one of the two is unset (None / the zero id)."""
    if ctx.api_version >= TOPIC_ID_VERSION:
        return [(t.name, t.topic_id or NULL_TOPIC_ID) for t in request.topics]
    return [(name, NULL_TOPIC_ID) for name in request.topic_names]


def _delete(ctx: RequestContext, name: str | None, topic_id: uuid.UUID) -> tuple[str | None, uuid.UUID]:
    """Delete one topic named by name or id, returning its (name, id); raises ControllerError."""
    controller = ctx.controller
    if name is not None and topic_id != NULL_TOPIC_ID:
        raise ControllerError(ErrorCode.invalid_request, "You may not specify both topic name and topic id.")
    if topic_id != NULL_TOPIC_ID:
        topic = controller.working.topics_by_id.get(topic_id)
        if topic is None:
            raise ControllerError(ErrorCode.unknown_topic_id, "This server does not host this topic ID.")
        name = topic.name
    if name is None:
        raise ControllerError(ErrorCode.invalid_request, "Neither topic name nor id were specified.")
    if not ctx.config["delete.topic.enable"]:
        if ctx.api_version < 3:  # TOPIC_DELETION_DISABLED only exists from v3
            raise ControllerError(ErrorCode.invalid_request, "Topic deletion is disabled.")
        raise ControllerError(ErrorCode.topic_deletion_disabled, "Topic deletion is disabled.")
    return name, controller.delete_topic(name)


def handle(ctx: RequestContext, request: Any) -> Any:
    results = []
    for (name, topic_id), repeated in flag_duplicates(_requested(ctx, request), lambda pair: pair):
        code, message = ErrorCode.none, None
        try:
            if repeated:
                what = "name" if topic_id == NULL_TOPIC_ID else "id"
                raise ControllerError(ErrorCode.invalid_request, f"Duplicate topic {what}.")
            name, topic_id = _delete(ctx, name, topic_id)
        except ControllerError as exc:
            code, message = exc.code, exc.message
        results.append(ctx.make("DeletableTopicResult", name=name, topic_id=topic_id, error_code=code,
                                error_message=message))
    return ctx.make("DeleteTopicsResponse", throttle_time=0, responses=results)
