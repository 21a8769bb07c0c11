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
from kio.serial._introspect import EntityTupleField, PrimitiveField, classify_field

from bus.protocol.messages import Shapes

# Request-side names of the same identity under the response's field name.
_ALIASES = {
    "partition_index": ("partition", "index"),
    "index": ("partition_index", "partition"),
    "partition": ("partition_index", "index"),
    "name": ("topic", "topic_name"),
    "topic": ("name", "topic_name"),
    "topic_name": ("name", "topic"),
}

# Kafka's Errors.java messages for the codes this is used with.
ERROR_MESSAGES = {
    ErrorCode.unknown_server_error: "The server experienced an unexpected error when processing the request.",
}


def error_response(shapes: Shapes, response_cls: type, request: Any, code: ErrorCode) -> Any:
    """`response_cls` (the negotiated version's response) answering every part of `request` with `code`."""
    return _mirror(shapes, response_cls, request, code)


def _mirror(shapes: Shapes, cls: type, source: Any, code: ErrorCode) -> Any:
    fields = {f.name: f for f in dataclasses.fields(cls)}
    values: dict[str, Any] = {}
    if "error_code" in fields:
        values["error_code"] = code
        if "error_message" in fields:
            values["error_message"] = ERROR_MESSAGES.get(code, code.name)
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
                values[field.name] = tuple(_mirror(shapes, kind.type_, item, code) for item in items)
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
