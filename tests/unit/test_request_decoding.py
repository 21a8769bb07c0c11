"""The request decoder against well-formed and malformed frames (sans-IO, no broker)."""

import contextlib
import io
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.request_header.v2.header import RequestHeader
from kio.serial import entity_writer

from bus.protocol import header as hdr
from bus.protocol import messages
from bus.protocol.guard import MalformedRequest


def _metadata_frame() -> bytes:
    out = io.BytesIO()
    entity_writer(RequestHeader)(out, RequestHeader(request_api_key=3, request_api_version=12, correlation_id=7,
                                                    client_id="rdkafka"))
    entity_writer(MetadataRequest)(out, MetadataRequest(topics=(MetadataRequestTopic(topic_id=None, name="t"),),
                                                        allow_auto_topic_creation=True,
                                                        include_topic_authorized_operations=False))
    return out.getvalue()


def test_header_and_body_round_trip():
    frame = _metadata_frame()
    header = hdr.parse_request_header(frame, flexible=True)
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (3, 12, 7, "rdkafka")
    request = messages.decode_request(3, 12, frame, header.body_offset)
    assert request.topics[0].name == "t"


def test_truncated_header():
    with pytest.raises(hdr.HeaderError):
        hdr.peek_api(b"\x00\x03")
    with pytest.raises(hdr.HeaderError):
        hdr.parse_request_header(struct.pack(">hhih", 3, 12, 1, 50) + b"abc", flexible=True)


def test_response_builder_fills_and_drops_fields_per_version():
    v0 = messages.shapes(3, 0).make("MetadataResponse", throttle_time=5, brokers=[], cluster_id="c", topics=[])
    v12 = messages.shapes(3, 12).make("MetadataResponse", throttle_time=5, brokers=[], cluster_id="c", topics=[])
    assert not hasattr(v0, "cluster_id") and v12.cluster_id == "c"
    assert messages.encode(v0) == b"\x00\x00\x00\x00" * 2


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=0, max_size=200), st.sampled_from([(3, 12), (0, 9), (1, 12), (18, 3), (19, 7)]))
def test_malformed_bodies_never_abort_the_process(garbage, api):
    """Whatever the bytes, decoding returns or raises an ordinary exception (which the dispatcher turns into
    a closed connection). The failure this guards against is the process dying inside kio's native code:
    before `bus.protocol.guard`, this test killed its pytest worker ("memory allocation ... failed")."""
    key, version = api
    frame = struct.pack(">hhih", key, version, 1, -1) + b"\x00" + garbage
    with contextlib.suppress(Exception):
        header = hdr.parse_request_header(frame, flexible=True)
        messages.decode_request(key, version, frame, header.body_offset)


def test_mutated_valid_frame_never_aborts_and_length_damage_is_refused():
    """Every single-byte mutation of a valid frame decodes or raises; one that makes the topics array
    claim more entries than the frame holds is refused by the guard, not handed to kio."""
    frame = bytearray(_metadata_frame())
    refused = 0
    for i in range(len(frame)):
        for value in (0x00, 0x7F, 0xFF):
            mutated = bytearray(frame)
            mutated[i] = value
            try:
                header = hdr.parse_request_header(bytes(mutated), flexible=True)
                messages.decode_request(3, 12, bytes(mutated), header.body_offset)
            except MalformedRequest:
                refused += 1
            except Exception:
                continue
    assert refused > 0


def test_huge_declared_array_is_refused_before_kio_allocates():
    """Regression: kio's native reader aborted the process allocating 128 GB for this body."""
    garbage = bytes.fromhex("a5c3f2f13b74598317e355ad0946d79686c49dd85521922a6eaf4fb771ba3e7dbf6207f580411e49")
    frame = struct.pack(">hhih", 3, 12, 1, -1) + b"\x00" + garbage
    header = hdr.parse_request_header(frame, flexible=True)
    with pytest.raises(MalformedRequest):
        messages.decode_request(3, 12, frame, header.body_offset)
