"""Request and response headers.

The request header is parsed by hand rather than through kio because its version depends on the
request body's version, which we only know after reading the first four bytes; parsing the few
fixed fields directly also keeps the per-request cost to a couple of struct calls.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

_PREFIX = struct.Struct(">hhi")
_INT16 = struct.Struct(">h")


class HeaderError(ValueError):
    """A request header that cannot be decoded."""


class RequestHeader(NamedTuple):
    """A named tuple rather than a frozen dataclass: one is built per request, and it is cheaper."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body_offset: int  # where the request body starts in the frame


def read_uvarint(buf: bytes, pos: int, end: int | None = None) -> tuple[int, int]:
    """Unsigned varint (protobuf style) used by flexible versions; returns (value, new position).

    Reads no further than `end` (default: the buffer's end), so a varint cannot run past its field.
    """
    limit = len(buf) if end is None else end
    result = 0
    shift = 0
    while True:
        if pos >= limit:
            raise HeaderError("truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 28:
            raise HeaderError("varint too long")


def skip_tagged_fields(buf: bytes, pos: int) -> int:
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        _tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
        if pos > len(buf):
            raise HeaderError("truncated tagged field")
    return pos


def peek_api(frame: bytes) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id): enough to answer even a request we cannot parse."""
    if len(frame) < 8:
        raise HeaderError(f"request frame of {len(frame)} bytes is shorter than a request header")
    return _PREFIX.unpack_from(frame, 0)


def parse_request_header(frame: bytes, flexible: bool) -> RequestHeader:
    """Header v1 (`flexible=False`) or v2 (adds tagged fields); client_id is a legacy string in both."""
    api_key, api_version, correlation_id = peek_api(frame)
    if len(frame) < 10:
        raise HeaderError("request header truncated before client_id")
    (length,) = _INT16.unpack_from(frame, 8)
    pos = 10
    client_id: str | None = None
    if length >= 0:
        if pos + length > len(frame):
            raise HeaderError("request header truncated inside client_id")
        try:
            client_id = frame[pos : pos + length].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise HeaderError("client_id is not UTF-8") from exc
        pos += length
    elif length != -1:
        raise HeaderError(f"invalid client_id length {length}")
    if flexible:
        if pos < len(frame) and frame[pos] == 0:  # no tagged fields: the usual case, without the general walk
            pos += 1
        else:
            pos = skip_tagged_fields(frame, pos)
    return RequestHeader(api_key, api_version, correlation_id, client_id, pos)


_CORRELATION = struct.Struct(">ii")
_CORRELATION_FLEX = struct.Struct(">iiB")


def response_frame(correlation_id: int, body: bytes, flexible_header: bool) -> bytes:
    """Size prefix + response header (v0, or v1 with empty tagged fields) + body."""
    if flexible_header:
        return _CORRELATION_FLEX.pack(len(body) + 5, correlation_id, 0) + body
    return _CORRELATION.pack(len(body) + 4, correlation_id) + body
