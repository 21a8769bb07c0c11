"""A client's side of the wire: request frames out, response frames in (the broker's side is in `messages`).

Shared by the blocking client (`bus.client.connection`) and the asyncio inter-node client
(`bus.network.network_client`), so both frame requests and read responses the same way: request
header v1 (v2 with an empty tagged-field section for flexible versions), response header v0 (v1 for
flexible versions, except ApiVersions, whose response header stays v0 so that any client can read it).
"""

from __future__ import annotations

import dataclasses
import functools
import io
import struct
from typing import Any, get_args, get_origin

from kio.serial import entity_reader, entity_writer
from kio.serial.errors import OutOfBoundValue
from kio.static.primitive import i32, i64

from bus.protocol import header as hdr
from bus.protocol.schemas import response_schema

API_VERSIONS = 18
_SIZE = struct.Struct(">i")
_HEADER = struct.Struct(">hhih")


class ResponseMismatch(ValueError):
    """A response frame whose correlation id is not the one expected."""


def encode_request(correlation_id: int, client_id: str, request: Any, version: int) -> memoryview:
    """The whole request frame (size prefix, header, body) of a kio request object at `version`."""
    out = io.BytesIO()
    out.write(b"\0\0\0\0")
    client = client_id.encode()
    out.write(_HEADER.pack(int(request.__api_key__), version, correlation_id, len(client)) + client)
    if type(request).__flexible__:
        out.write(b"\0")  # header v2: empty tagged fields
    entity_writer(type(request))(out, request)
    frame = out.getbuffer()
    _SIZE.pack_into(frame, 0, len(frame) - 4)
    return frame


def response_correlation_id(frame: bytes) -> int:
    """The correlation id of a response frame (without its size prefix)."""
    if len(frame) < 4:
        raise ResponseMismatch(f"response frame of {len(frame)} bytes has no header")
    return int(_SIZE.unpack_from(frame, 0)[0])


def decode_response(frame: bytes, api_key: int, version: int) -> Any:
    """The kio response in a response frame (without its size prefix) to a request of `api_key` at `version`."""
    response_cls = response_schema(api_key, version)
    offset = 4
    if response_cls.__flexible__ and api_key != API_VERSIONS:
        offset = hdr.skip_tagged_fields(frame, offset)
    try:
        response, _ = entity_reader(response_cls)(frame, offset)
    except OutOfBoundValue:
        # kio reads an int64 time as a datetime and refuses -1, which Kafka sends for "no time" (DescribeTransactions'
        # start time of an id without an open transaction): read such a frame with the times as plain integers.
        response, _ = entity_reader(_lenient(response_cls))(frame, offset)
    return response


_AS_INTEGER = {"datetime_i64": ("int64", i64), "timedelta_i32": ("int32", i32)}
_SCHEMA_VARS = ("__type__", "__version__", "__flexible__", "__api_key__", "__header_schema__")


@functools.cache
def _lenient(cls: type) -> type:
    """A copy of the kio schema `cls` (and of the schemas nested in it) whose times are plain millisecond integers."""
    fields = []
    for f in dataclasses.fields(cls):
        kind, field_type, metadata = f.metadata.get("kafka_type"), f.type, dict(f.metadata)
        if kind in _AS_INTEGER:
            metadata["kafka_type"], field_type = _AS_INTEGER[kind]
        elif get_origin(field_type) is tuple and dataclasses.is_dataclass(get_args(field_type)[0]):
            field_type = tuple[_lenient(get_args(field_type)[0]), ...]  # type: ignore[misc]
        elif isinstance(field_type, type) and dataclasses.is_dataclass(field_type):
            field_type = _lenient(field_type)
        default: dict[str, Any] = {}
        if f.default is not dataclasses.MISSING:
            default["default"] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default["default_factory"] = f.default_factory
        fields.append((f.name, field_type, dataclasses.field(metadata=metadata, **default)))
    namespace = {name: vars(cls)[name] for name in _SCHEMA_VARS if name in vars(cls)}
    return dataclasses.make_dataclass(cls.__name__, fields, namespace=namespace, frozen=True, slots=True)
