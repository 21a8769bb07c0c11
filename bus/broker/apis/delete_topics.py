"""DeleteTopics (20): remove topics by name (v1-5) or by name or id (v6).

The controller commits a remove-topic record; the replica manager then drops the partitions and
deletes their logs. `delete.topic.enable=false` refuses every deletion, as Kafka does.

Authorization (Kafka's ControllerApis.deleteTopics): DELETE on the cluster allows every topic, else each needs DELETE
on itself (TOPIC_AUTHORIZATION_FAILED). A topic named without DESCRIBE on it is answered TOPIC_AUTHORIZATION_FAILED
whether it exists or not, and one named by id without DESCRIBE gets its error without its name: neither existence nor
the id's topic is disclosed.
"""

from __future__ import annotations

import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.apis._common import NULL_TOPIC_ID, flag_duplicates
from bus.broker.context import RequestContext
from bus.controller.controller import ControllerError
from bus.protocol.error_response import ERROR_MESSAGES
from bus.security.acls import AclOperation, ResourceType

API_KEY = 20
MIN_VERSION = 1
MAX_VERSION = 6

TOPIC_ID_VERSION = 6


def _requested(ctx: RequestContext, request: Any) -> list[tuple[str | None, uuid.UUID]]:
    """(name, id) pairs as the client sent them; one of the two is unset (None / the zero id)."""
    if ctx.api_version >= TOPIC_ID_VERSION:
        return [(t.name, t.topic_id or NULL_TOPIC_ID) for t in request.topics]
    return [(name, NULL_TOPIC_ID) for name in request.topic_names]


class _Refused(ControllerError):
    """TOPIC_AUTHORIZATION_FAILED, answered with the name only if the principal may describe the topic."""

    def __init__(self, name: str | None) -> None:
        code = ErrorCode.topic_authorization_failed
        super().__init__(code, ERROR_MESSAGES[code])
        self.name = name


class _Permissions:
    """What the principal may do to the topics of one request (DELETE on the cluster: everything)."""

    def __init__(self, ctx: RequestContext, names: set[str]) -> None:
        if ctx.authorize_cluster(AclOperation.DELETE, log_if_denied=False):
            self.describable = self.deletable = names
        else:
            self.describable = ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, names)
            self.deletable = ctx.authorized(AclOperation.DELETE, ResourceType.TOPIC, names)


def _name_of(ctx: RequestContext, name: str | None, topic_id: uuid.UUID) -> str | None:
    """The name of a topic named by name or by id (None for an unknown id or neither)."""
    if topic_id != NULL_TOPIC_ID:
        topic = ctx.controller.working.topics_by_id.get(topic_id)
        return None if topic is None else topic.name
    return name


def _delete(ctx: RequestContext, name: str | None, topic_id: uuid.UUID,
            permissions: _Permissions) -> tuple[str | None, uuid.UUID]:
    """Delete one topic named by name or id, returning its (name, id); raises ControllerError."""
    controller = ctx.controller
    if name is not None and topic_id != NULL_TOPIC_ID:
        raise ControllerError(ErrorCode.invalid_request, "You may not specify both topic name and topic id.")
    by_id = topic_id != NULL_TOPIC_ID
    name = _name_of(ctx, name, topic_id)
    if name is None:
        if by_id:
            raise ControllerError(ErrorCode.unknown_topic_id, "This server does not host this topic ID.")
        raise ControllerError(ErrorCode.invalid_request, "Neither topic name nor id were specified.")
    if not ctx.config["delete.topic.enable"]:
        if ctx.api_version < 3:  # TOPIC_DELETION_DISABLED only exists from v3
            raise ControllerError(ErrorCode.invalid_request, "Topic deletion is disabled.")
        raise ControllerError(ErrorCode.topic_deletion_disabled, "Topic deletion is disabled.")
    if name not in permissions.describable:
        raise _Refused(None if by_id else name)
    if not by_id:
        controller.topic(name)  # UNKNOWN_TOPIC_OR_PARTITION only to a principal that may describe it
    if name not in permissions.deletable:
        raise _Refused(name)
    return name, controller.delete_topic(name)


def handle(ctx: RequestContext, request: Any) -> Any:
    requested = _requested(ctx, request)
    names = {n for name, topic_id in requested if (n := _name_of(ctx, name, topic_id)) is not None}
    permissions = _Permissions(ctx, names)
    results = []
    for (name, topic_id), repeated in flag_duplicates(requested, lambda pair: pair):
        code, message = ErrorCode.none, None
        try:
            if repeated:
                what = "name" if topic_id == NULL_TOPIC_ID else "id"
                raise ControllerError(ErrorCode.invalid_request, f"Duplicate topic {what}.")
            name, topic_id = _delete(ctx, name, topic_id, permissions)
        except _Refused as exc:
            code, message, name = exc.code, exc.message, exc.name
        except ControllerError as exc:
            code, message = exc.code, exc.message
        results.append(ctx.make("DeletableTopicResult", name=name, topic_id=topic_id, error_code=code,
                                error_message=message))
    return ctx.make("DeleteTopicsResponse", throttle_time=0, responses=results)
