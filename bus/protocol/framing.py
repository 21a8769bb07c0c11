"""Kafka's size-prefixed framing, sans-IO: feed bytes in, take complete frames out.

Kept free of sockets (as h11 is) so the malformed-input cases can be tested exhaustively and fuzzed
without a network; the asyncio connection is a thin shell around it.
"""

from __future__ import annotations

import struct

_SIZE = struct.Struct(">i")


class FrameError(ValueError):
    """The peer sent a frame the broker refuses; the connection must be closed."""


class FrameDecoder:
    """Splits a byte stream into request frames of at most `max_frame_bytes` (socket.request.max.bytes, or
    sasl.server.max.receive.size before a SASL connection is authenticated: `limit_key` names the one in force)."""

    __slots__ = ("_buffer", "_need", "limit_key", "max_frame_bytes")

    def __init__(self, max_frame_bytes: int, limit_key: str = "socket.request.max.bytes") -> None:
        self.max_frame_bytes = max_frame_bytes
        self.limit_key = limit_key
        self._buffer = bytearray()
        self._need = -1  # size of the frame being assembled, -1 while reading its prefix

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    def feed(self, data: bytes) -> list[bytes]:
        """Append `data`; return every frame now complete (without its size prefix).

        With nothing buffered (the common case: a read ends on a frame boundary) frames are sliced
        straight out of `data`, one copy each; only an incomplete tail is kept in the buffer.
        """
        if self._need < 0 and not self._buffer and len(data) >= 4:
            (size,) = _SIZE.unpack_from(data, 0)
            if len(data) == size + 4 and 0 <= size <= self.max_frame_bytes:  # exactly one frame: the usual read
                return [bytes(data[4:])]
        buf: bytes | bytearray = data
        if self._buffer:
            self._buffer += data
            buf = self._buffer
        frames: list[bytes] = []
        pos = 0
        end = len(buf)
        while True:
            if self._need < 0:
                if end - pos < 4:
                    break
                (size,) = _SIZE.unpack_from(buf, pos)
                if size < 0:
                    raise FrameError(f"invalid frame size {size}")
                if size > self.max_frame_bytes:
                    raise FrameError(
                        f"frame of {size} bytes exceeds {self.limit_key}={self.max_frame_bytes}"
                    )
                self._need = size
                pos += 4
            if end - pos < self._need:
                break
            frames.append(bytes(buf[pos : pos + self._need]))
            pos += self._need
            self._need = -1
        if buf is self._buffer:
            del self._buffer[:pos]
        elif pos < end:
            self._buffer += memoryview(data)[pos:]
        return frames


def frame(payload: bytes) -> bytes:
    """Prefix `payload` with its size."""
    return _SIZE.pack(len(payload)) + payload
