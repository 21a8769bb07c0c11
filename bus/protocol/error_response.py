"""A response that answers a whole request with one error code (Kafka's `AbstractRequest.getErrorResponse`).

Kafka writes `getErrorResponse` by hand for each request type; we derive it from the schemas: the
response mirrors the request's entities (topics, partitions, groups, resources: an array answers the
request array of the same name, or the only one) and every `error_code` in it, top-level or per
entity, is set. A client then fails exactly what it asked for and retries, instead of losing its
connection and every request in flight with it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from kio.schema.errors import ErrorCode
from kio.serial._introspect import EntityField, EntityTupleField, PrimitiveField, classify_field

from bus.protocol.messages import Shapes

# Request-side names of the same identity under the response's field name.
_ALIASES = {
    "partition_index": ("partition", "index"),
    "index": ("partition_index", "partition"),
    "partition": ("partition_index", "index"),
    "name": ("topic", "topic_name"),
    "topic": ("name", "topic_name"),
    "topic_name": ("name", "topic"),
    "user": ("name",),
}

# Kafka's Errors.java messages for the codes this is used with.
ERROR_MESSAGES = {
    ErrorCode.unknown_server_error: "The server experienced an unexpected error when processing the request.",
    ErrorCode.topic_authorization_failed: "Topic authorization failed.",
    ErrorCode.group_authorization_failed: "Group authorization failed.",
    ErrorCode.cluster_authorization_failed: "Cluster authorization failed.",
    ErrorCode.transactional_id_authorization_failed: "Transactional Id authorization failed.",
    ErrorCode.security_disabled: "Security features are disabled.",
}


def error_response(shapes: Shapes, response_cls: type, request: Any, code: ErrorCode,
                   message: str | None = None) -> Any:
    """`response_cls` (the negotiated version's response) answering every part of `request` with `code`, and with
    `message` (default: Kafka's message for the code) where the response has a message."""
    text = message or ERROR_MESSAGES.get(code, code.name)
    hand_written = _HAND_WRITTEN.get(response_cls.__name__)
    if hand_written is not None:
        return hand_written(shapes, request, code, text)
    return _mirror(shapes, response_cls, request, code, text)


def _alter_user_scram_credentials(shapes: Shapes, request: Any, code: ErrorCode, message: str) -> Any:
    """One result per user the deletions or the upsertions name, sorted: the one answer that no single request array
    mirrors (Kafka's AlterUserScramCredentialsRequest.getErrorResponse)."""
    users = sorted({item.name for item in (*request.deletions, *request.upsertions)})
    return shapes.make("AlterUserScramCredentialsResponse", throttle_time=0, results=[
        shapes.make("AlterUserScramCredentialsResult", user=user, error_code=code, error_message=message)
        for user in users])


_HAND_WRITTEN = {"AlterUserScramCredentialsResponse": _alter_user_scram_credentials}


def _mirror(shapes: Shapes, cls: type, source: Any, code: ErrorCode, message: str) -> Any:
    fields = {f.name: f for f in dataclasses.fields(cls)}
    values: dict[str, Any] = {}
    if "error_code" in fields:
        values["error_code"] = code
        if "error_message" in fields:
            values["error_message"] = message
    source_fields = {f.name: f for f in dataclasses.fields(type(source))} if source is not None else {}
    source_tuples = [f for f in source_fields.values() if isinstance(classify_field(f), EntityTupleField)]
    target_tuples = [f for f in fields.values() if isinstance(classify_field(f), EntityTupleField)]
    for field in fields.values():
        kind = classify_field(field)
        if isinstance(kind, PrimitiveField) and field.name not in values:
            for name in (field.name, *_ALIASES.get(field.name, ())):
                if name in source_fields and isinstance(classify_field(source_fields[name]), PrimitiveField):
                    values[field.name] = getattr(source, name)
                    break
        elif isinstance(kind, EntityTupleField):
            paired = _pair(field, source_fields, source_tuples, target_tuples)
            if paired is not None:
                items = getattr(source, paired.name) or ()
                values[field.name] = tuple(_mirror(shapes, kind.type_, item, code, message) for item in items)
    return shapes.make(cls.__name__, **values)


def _pair(field: dataclasses.Field[Any], source_fields: dict[str, dataclasses.Field[Any]],
          source_tuples: list[dataclasses.Field[Any]],
          target_tuples: list[dataclasses.Field[Any]]) -> dataclasses.Field[Any] | None:
    """The request array a response array answers: the same name, or the only array on each side."""
    same = source_fields.get(field.name)
    if same is not None and same in source_tuples:
        return same
    if len(source_tuples) == 1 and len(target_tuples) == 1:
        return source_tuples[0]
    return None


def answers_only(response: Any, code: ErrorCode) -> bool:
    """Whether `response` has at least one `error_code` (top-level or in any entity) and every one is `code`: the
    answer `error_response` builds, e.g. NOT_CONTROLLER throughout from a controller that lost its leadership before
    the change committed."""
    seen = False
    pending = [response]
    while pending:
        entity = pending.pop()
        for field in dataclasses.fields(entity):
            value = getattr(entity, field.name)
            if field.name == "error_code":
                if value != code:
                    return False
                seen = True
            elif isinstance(classify_field(field), EntityTupleField):
                pending.extend(value or ())
            elif isinstance(classify_field(field), EntityField) and value is not None:
                pending.append(value)
    return seen
