"""A bounds check for request bodies before kio's native decoder sees them.

kio's Rust reader sizes its buffers from the lengths a frame declares, so an array count of two
billion makes it request that much memory and the process aborts ("memory allocation failed"): a
single malformed frame would kill the broker. This walker follows the same schema without building
anything and refuses any length that cannot fit in the bytes that remain, so the decoder only ever
sees frames whose every declared length is possible. (Found by the fuzz test in tests/unit.)
"""

from __future__ import annotations

import dataclasses
import functools
import struct
from collections.abc import Callable
from typing import Any

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_schema_field_type,
    is_optional,
)

from bus.protocol.header import HeaderError, read_uvarint


class MalformedRequest(HeaderError):
    """A declared length or count that the frame cannot contain."""


_FIXED = {
    "bool": 1, "int8": 1, "int16": 2, "uint16": 2, "error_code": 2, "int32": 4, "timedelta_i32": 4,
    "int64": 8, "timedelta_i64": 8, "datetime_i64": 8, "float64": 8, "uuid": 16,
}
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

Skip = Callable[[bytes, int, int], int]  # (buffer, position, end) -> new position


_uvarint = read_uvarint


def need(pos: int, size: int, end: int) -> int:
    if size < 0 or pos + size > end:
        raise MalformedRequest(f"declared length {size} exceeds the {end - pos} bytes left")
    return pos + size


def _primitive(kafka_type: str, flexible: bool) -> Skip:
    fixed = _FIXED.get(kafka_type)
    if fixed is not None:
        return lambda buf, pos, end: need(pos, fixed, end)
    if kafka_type not in ("string", "bytes", "records"):
        raise TypeError(f"unknown kafka_type {kafka_type}")
    if flexible:
        def compact(buf: bytes, pos: int, end: int) -> int:
            length, pos = _uvarint(buf, pos, end)
            return pos if length == 0 else need(pos, length - 1, end)
        return compact
    header = _I16 if kafka_type == "string" else _I32

    def legacy(buf: bytes, pos: int, end: int) -> int:
        pos = need(pos, header.size, end)
        (length,) = header.unpack_from(buf, pos - header.size)
        return pos if length == -1 else need(pos, length, end)
    return legacy


def _array(item: Skip, flexible: bool, nullable: bool) -> Skip:
    def skip(buf: bytes, pos: int, end: int) -> int:
        if flexible:
            count, pos = _uvarint(buf, pos, end)
            count -= 1
        else:
            pos = need(pos, 4, end)
            (count,) = _I32.unpack_from(buf, pos - 4)
        if count < 0:
            if not nullable:
                raise MalformedRequest("null for a non-nullable array")
            return pos
        if count > end - pos:  # every element takes at least one byte
            raise MalformedRequest(f"array of {count} elements in {end - pos} bytes")
        for _ in range(count):
            pos = item(buf, pos, end)
        return pos
    return skip


def _field_skip(field: dataclasses.Field[Any], flexible: bool) -> Skip:
    nullable = is_optional(field)
    match classify_field(field):
        case PrimitiveField():
            return _primitive(get_schema_field_type(field), flexible)
        case PrimitiveTupleField():
            return _array(_primitive(get_schema_field_type(field), flexible), flexible, nullable)
        case EntityField(entity):
            return _entity_skip(entity)
        case EntityTupleField(entity):
            return _array(_entity_skip(entity), flexible, nullable)
    raise TypeError(f"unclassifiable field {field.name}")


@functools.cache
def _entity_skip(cls: type) -> Skip:
    flexible = cls.__flexible__  # type: ignore[attr-defined]
    fields = dataclasses.fields(cls)
    regular = [_field_skip(f, flexible) for f in fields if "tag" not in f.metadata]
    tagged = {f.metadata["tag"]: _field_skip(f, flexible) for f in fields if "tag" in f.metadata}

    def skip(buf: bytes, pos: int, end: int) -> int:
        for step in regular:
            pos = step(buf, pos, end)
        if flexible:
            count, pos = _uvarint(buf, pos, end)
            if count > end - pos:
                raise MalformedRequest(f"{count} tagged fields in {end - pos} bytes")
            for _ in range(count):
                tag, pos = _uvarint(buf, pos, end)
                size, pos = _uvarint(buf, pos, end)
                field_end = need(pos, size, end)
                inner = tagged.get(tag)
                if inner is not None and inner(buf, pos, field_end) != field_end:
                    raise MalformedRequest(f"tagged field {tag} does not fill its {size} bytes")
                pos = field_end
        return pos
    return skip


def check_body(cls: type, frame: bytes, offset: int) -> None:
    """Raise MalformedRequest unless every length in the body of type `cls` fits in `frame`."""
    _entity_skip(cls)(frame, offset, len(frame))
