"""The least a CPython broker can spend on a request: the reference row of `broker_requests.py`.

A uvloop server that does only what any broker must do with a produce request and nothing a broker decides:
split the stream into Kafka frames, append each frame to a file, answer each with a fixed 60-byte response
carrying the request's correlation id. No decoding, no validation, no offsets, no index. It is driven like the
brokers are: one request per TCP write, paced at the same rate, by a plain socket client (a Kafka client would
need real answers). Its CPU per request is a floor under ours, against which a ratio to librdkafka's C mock
cluster can be judged: the closer the floor's own ratio to the target, the less room the Python work has.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing as mp
import os
import socket
import struct
import threading
import time

_RESPONSE_BODY = bytes(56)  # with the correlation id, 60 bytes: about a v9 ProduceResponse for one partition


class _FloorProtocol(asyncio.Protocol):
    def __init__(self, log_fd: int) -> None:
        self.log_fd = log_fd
        self.buffer = b""
        self.transport: asyncio.WriteTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a TCP one; uvloop's is not an asyncio.Transport

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer + data
        position, answers = 0, []
        while len(buffer) - position >= 4:
            size = int.from_bytes(buffer[position:position + 4], "big")
            if len(buffer) - position - 4 < size:
                break
            os.write(self.log_fd, buffer[position + 4:position + 4 + size])
            correlation_id = buffer[position + 8:position + 12]
            answers.append((len(_RESPONSE_BODY) + 4).to_bytes(4, "big") + correlation_id + _RESPONSE_BODY)
            position += 4 + size
        self.buffer = buffer[position:]
        if answers and self.transport is not None:
            self.transport.write(b"".join(answers))


def serve(log_path: str, ready: mp.Queue) -> None:
    """Run the floor server until killed; puts (pid, port) on `ready` once it listens."""
    import uvloop

    async def main() -> None:
        log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        server = await asyncio.get_running_loop().create_server(lambda: _FloorProtocol(log_fd), "127.0.0.1", 0)
        ready.put((os.getpid(), server.sockets[0].getsockname()[1]))
        await asyncio.Event().wait()

    uvloop.run(main())


def produce_frame() -> bytes:
    """A v9 ProduceRequest frame of one 100-byte record, as the paced producer of `broker_requests.py` sends."""
    from bus.protocol.client_codec import encode_request
    from bus.protocol.messages import request_shapes
    from bus.protocol.records import Record, build_batch

    batch = build_batch([Record(0, int(time.time() * 1000), None, b"x" * 100)], base_offset=0)
    shapes = request_shapes(0, 9)
    request = shapes.make("ProduceRequest", transactional_id=None, acks=1, timeout=30000, topic_data=[
        shapes.make("TopicProduceData", name="requests", partition_data=[
            shapes.make("PartitionProduceData", index=0, records=bytes(batch))])])
    return bytes(encode_request(0, "rdkafka", request, 9))


def drive(port: int, rate: int, seconds: float, frame: bytes) -> int:
    """Send `frame` (its correlation id set to the request's number) `rate` times a second, one frame per write,
    reading the answers in a thread; returns how many were sent once they are all answered."""
    total = int(rate * seconds)
    template = bytearray(frame)
    answered = threading.Event()
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def read_answers() -> None:
            expected, received = total * (4 + 4 + len(_RESPONSE_BODY)), 0
            with contextlib.suppress(OSError):
                while received < expected and (chunk := sock.recv(1 << 16)):
                    received += len(chunk)
            answered.set()

        reader = threading.Thread(target=read_answers, daemon=True)
        reader.start()
        start = time.perf_counter()
        for i in range(total):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            struct.pack_into(">i", template, 8, i)  # after the size, api key and version
            sock.sendall(template)
        if not answered.wait(30):
            raise TimeoutError("the floor server did not answer every request")
    return total
