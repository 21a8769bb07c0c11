"""A minimal Kafka wire client over a blocking socket, built on kio's codecs.

Integration tests need to send what no well-behaved client would (garbage, lying sizes, corrupt
batches, unknown versions) and then read the broker's exact answer, so this speaks the framing and
headers by hand and leaves the bodies to kio, the same generated codecs the broker uses.
"""

from __future__ import annotations

import io
import socket
import struct
from typing import Any

from kio.index import load_response_schema
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_reader, entity_writer

API_VERSIONS = 18


class RawKafka:
    """One TCP connection to the broker; requests go out one at a time and are answered in order."""

    def __init__(self, bootstrap: str, timeout: float = 5.0) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawKafka:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- bytes ----------------------------------------------------------------------------------
    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_frame(self, payload: bytes) -> None:
        self.sock.sendall(struct.pack(">i", len(payload)) + payload)

    def _read_exact(self, size: int) -> bytes:
        chunks = bytearray()
        while len(chunks) < size:
            chunk = self.sock.recv(size - len(chunks))
            if not chunk:
                raise ConnectionError(f"connection closed after {len(chunks)} of {size} bytes")
            chunks += chunk
        return bytes(chunks)

    def read_frame(self) -> bytes:
        (size,) = struct.unpack(">i", self._read_exact(4))
        return self._read_exact(size)

    def is_closed_by_peer(self, wait: float = 3.0) -> bool:
        """True when the broker closes (or resets) this connection within `wait` seconds."""
        self.sock.settimeout(wait)
        try:
            return self.sock.recv(1) == b""
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False

    # -- requests -------------------------------------------------------------------------------
    def encode(self, request: Any, correlation_id: int | None = None, client_id: str | None = "raw-test") -> bytes:
        """Header + body of `request` (a kio request dataclass), without the size prefix."""
        if correlation_id is None:
            self.correlation_id += 1
            correlation_id = self.correlation_id
        header_cls = RequestHeaderV2 if type(request).__flexible__ else RequestHeaderV1
        out = io.BytesIO()
        entity_writer(header_cls)(out, header_cls(
            request_api_key=type(request).__api_key__,
            request_api_version=type(request).__version__,
            correlation_id=correlation_id,
            client_id=client_id,
        ))
        entity_writer(type(request))(out, request)
        return out.getvalue()

    def request(self, request: Any) -> Any:
        """Send `request` and decode its response at the same version."""
        self.send_frame(self.encode(request))
        key, version = int(type(request).__api_key__), int(type(request).__version__)
        return self.read_response(key, version, self.correlation_id)

    def read_response(self, api_key: int, version: int, correlation_id: int) -> Any:
        frame = self.read_frame()
        (got,) = struct.unpack_from(">i", frame, 0)
        assert got == correlation_id, f"correlation id {got}, expected {correlation_id}"
        cls = load_response_schema(api_key, version)
        # ApiVersions always answers with response header v0 (KIP-511), whatever its version.
        offset = 5 if cls.__flexible__ and api_key != API_VERSIONS else 4
        response, _size = entity_reader(cls)(frame, offset)
        return response


def header_only(api_key: int, version: int, correlation_id: int, client_id: bytes = b"raw-test",
                flexible: bool = False) -> bytes:
    """A request header (v1, or v2 with an empty tag section) with no body, as raw bytes."""
    out = struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id
    return out + (b"\x00" if flexible else b"")


def produce_request(topic: str, partition: int, records: bytes, acks: int = -1) -> Any:
    """A ProduceRequest v9 carrying `records` (one or more encoded batches) for one partition."""
    import datetime

    from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

    return ProduceRequest(
        transactional_id=None,
        acks=acks,
        timeout=datetime.timedelta(seconds=5),
        topic_data=(TopicProduceData(name=topic, partition_data=(PartitionProduceData(index=partition,
                                                                                        records=records),)),),
    )


def produce_error(raw: RawKafka, topic: str, partition: int, records: bytes) -> tuple[int, int]:
    """(error code, base offset) of a one-partition produce."""
    response = raw.request(produce_request(topic, partition, records))
    [topic_response] = response.responses
    [part] = topic_response.partition_responses
    return part.error_code.value, part.base_offset


def metadata_request(*topics: str, allow_auto_create: bool = True) -> Any:
    from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

    return MetadataRequest(
        topics=tuple(MetadataRequestTopic(topic_id=None, name=t) for t in topics),
        allow_auto_topic_creation=allow_auto_create,
        include_topic_authorized_operations=False,
    )


def api_versions_request() -> Any:
    from kio.schema.api_versions.v3.request import ApiVersionsRequest

    return ApiVersionsRequest(client_software_name="raw-test", client_software_version="1.0")
