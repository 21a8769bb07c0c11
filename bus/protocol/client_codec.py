"""A client's side of the wire: request frames out, response frames in (the broker's side is in `messages`).

Shared by the blocking client (`bus.client.connection`) and the asyncio inter-node client
(`bus.broker.network_client`), so both frame requests and read responses the same way: request
header v1 (v2 with an empty tagged-field section for flexible versions), response header v0 (v1 for
flexible versions, except ApiVersions, whose response header stays v0 so that any client can read it).
"""

from __future__ import annotations

import io
import struct
from typing import Any

from kio.index import load_response_schema
from kio.serial import entity_reader, entity_writer

from bus.protocol import header as hdr

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
    response_cls = load_response_schema(api_key, version)
    offset = 4
    if response_cls.__flexible__ and api_key != API_VERSIONS:
        offset = hdr.skip_tagged_fields(frame, offset)
    response, _ = entity_reader(response_cls)(frame, offset)
    return response
