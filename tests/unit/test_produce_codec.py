"""The hand-written Produce codec against kio's generic one: byte for byte, every version we serve."""

from __future__ import annotations

import io
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer

from bus.protocol import messages, produce_codec
from bus.protocol.guard import check_body
from bus.protocol.header import HeaderError

VERSIONS = range(produce_codec.MIN_VERSION, produce_codec.MAX_VERSION + 1)
_I32 = st.integers(-(2**31), 2**31 - 1)
_I64 = st.integers(-(2**63), 2**63 - 1)
_TEXT = st.text(max_size=20)


def _kio_frame(correlation_id: int, response: object) -> bytes:
    """What kio's generic writer puts on the wire for this response (header v0/v1 + body)."""
    body = io.BytesIO()
    entity_writer(type(response))(body, response)
    header = struct.pack(">i", correlation_id) + (b"\x00" if type(response).__flexible__ else b"")
    payload = header + body.getvalue()
    return struct.pack(">i", len(payload)) + payload


@st.composite
def responses(draw: st.DrawFn, version: int) -> object:
    shapes = messages.shapes(0, version)
    append_time = st.one_of(st.just(-1), st.integers(0, 2**42))  # what handlers pass: -1 or epoch millis

    def partition() -> object:
        values = dict(index=draw(_I32), error_code=draw(st.sampled_from(list(ErrorCode))), base_offset=draw(_I64),
                      log_append_time=draw(append_time), log_start_offset=draw(_I64))
        if version >= 8:
            values["error_message"] = draw(st.none() | _TEXT)
            values["record_errors"] = [
                shapes.make("BatchIndexAndErrorMessage", batch_index=draw(_I32),
                            batch_index_error_message=draw(st.none() | _TEXT))
                for _ in range(draw(st.integers(0, 3)))]
        if version >= 10 and draw(st.booleans()):
            values["current_leader"] = shapes.make("LeaderIdAndEpoch", leader_id=draw(_I32), leader_epoch=draw(_I32))
        return shapes.make("PartitionProduceResponse", **values)

    topics = [shapes.make("TopicProduceResponse", name=draw(_TEXT),
                          partition_responses=[partition() for _ in range(draw(st.integers(0, 3)))])
              for _ in range(draw(st.integers(0, 3)))]
    values = {"responses": topics, "throttle_time": draw(st.integers(0, 2**31 - 1))}
    if version >= 10 and draw(st.integers(0, 4)) == 0:
        values["node_endpoints"] = [shapes.make("NodeEndpoint", node_id=1, host="h", port=9092)]
    return shapes.make("ProduceResponse", **values)


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=150, deadline=None)
@given(data=st.data(), correlation_id=_I32)
def test_response_bytes_equal_kio(version: int, data: st.DataObject, correlation_id: int) -> None:
    response = data.draw(responses(version))
    fast = produce_codec.encode_response(correlation_id, response, version)
    if fast is None:  # only the leader-discovery tags are left to kio
        assert version >= 10 and produce_codec._has_leader_tags(response)
        return
    assert bytes(fast) == _kio_frame(correlation_id, response)
    assert bytes(messages.encode_response(correlation_id, response, True)) == bytes(fast)


@st.composite
def request_bodies(draw: st.DrawFn, version: int) -> bytes:
    shapes = messages.request_shapes(0, version)
    topics = [shapes.make("TopicProduceData", name=draw(_TEXT), partition_data=[
        shapes.make("PartitionProduceData", index=draw(_I32), records=draw(st.none() | st.binary(max_size=40)))
        for _ in range(draw(st.integers(0, 3)))]) for _ in range(draw(st.integers(0, 3)))]
    request = shapes.make("ProduceRequest", transactional_id=draw(st.none() | _TEXT),
                          acks=draw(st.sampled_from([-1, 0, 1])), timeout=draw(st.integers(0, 2**31 - 1)),
                          topic_data=topics)
    return messages.encode(request)


def _refuses(check: object, body: bytes, version: int) -> bool:
    try:
        check(body, version)  # type: ignore[operator]
    except HeaderError:
        return True
    return False


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_request_check_refuses_exactly_what_the_generic_guard_refuses(version: int, data: st.DataObject) -> None:
    body = data.draw(request_bodies(version))
    cls = messages.request_class(0, version)
    produce_codec.check_request(body, 0, version)  # a well-formed request passes
    mutated = bytearray(body[: data.draw(st.integers(0, len(body)))])
    for _ in range(data.draw(st.integers(0, 3))):
        if mutated:
            mutated[data.draw(st.integers(0, len(mutated) - 1))] = data.draw(st.integers(0, 255))
    mutated += data.draw(st.binary(max_size=8))
    frame = bytes(mutated)
    generic = _refuses(lambda b, v: check_body(cls, b, 0), frame, version)
    assert _refuses(lambda b, v: produce_codec.check_request(b, 0, v), frame, version) == generic


def test_huge_declared_counts_are_refused_before_decoding() -> None:
    """The bounds check exists for this: a count of two billion must never reach kio's native reader."""
    legacy = struct.pack(">hhi", -1, 1, 30_000) + struct.pack(">i", 2**31 - 1)
    with pytest.raises(HeaderError, match="array of"):
        produce_codec.check_request(legacy, 0, 8)
    flexible = b"\x00" + struct.pack(">hi", 1, 30_000) + b"\xff\xff\xff\xff\x07"
    with pytest.raises(HeaderError, match="array of"):
        produce_codec.check_request(flexible, 0, 9)
