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


def _kio_decode(body: bytes, version: int) -> object | None:
    """kio's reading of a Produce body behind the generic guard, or None where either refuses it."""
    try:
        check_body(messages.request_class(0, version), body, 0)
        return messages._reader(messages.request_class(0, version))(body, 0)[0]
    except Exception:
        return None


def _parsed(body: bytes, version: int) -> produce_codec.ProduceRequest | None:
    try:
        return produce_codec.parse_request(body, 0, version)
    except HeaderError:
        return None


def _same_request(ours: produce_codec.ProduceRequest, kio: object) -> bool:
    return (ours.transactional_id == kio.transactional_id and ours.acks == kio.acks  # type: ignore[attr-defined]
            and ours.timeout_ms == round(kio.timeout.total_seconds() * 1000)  # type: ignore[attr-defined]
            and [(t.name, [(p.index, p.records) for p in t.partition_data]) for t in ours.topic_data]
            == [(t.name, [(p.index, p.records) for p in t.partition_data])
                for t in kio.topic_data])  # type: ignore[attr-defined]


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_parsed_requests_equal_kio_and_refusals_match(version: int, data: st.DataObject) -> None:
    """The broker reads Produce with `parse_request`: the same values as kio, the same frames refused."""
    body = data.draw(request_bodies(version))
    ours = _parsed(body, version)
    assert ours is not None and _same_request(ours, _kio_decode(body, version))
    mutated = bytearray(body[: data.draw(st.integers(0, len(body)))])
    for _ in range(data.draw(st.integers(0, 3))):
        if mutated:
            mutated[data.draw(st.integers(0, len(mutated) - 1))] = data.draw(st.integers(0, 255))
    frame = bytes(mutated)
    ours, theirs = _parsed(frame, version), _kio_decode(frame, version)
    assert (ours is None) == (theirs is None)
    if ours is not None:
        assert _same_request(ours, theirs)


@st.composite
def answers(draw: st.DrawFn, version: int) -> tuple[object, produce_codec.ProduceAnswer]:
    """The same ProduceResponse as kio's dataclasses and as the handler's own values."""
    shapes = messages.shapes(0, version)
    topics_kio, topics_ours = [], []
    for _ in range(draw(st.integers(0, 3))):
        parts_kio, parts_ours = [], []
        for _ in range(draw(st.integers(0, 3))):
            index, code, base, start = draw(_I32), draw(st.sampled_from(list(ErrorCode))), draw(_I64), draw(_I64)
            append_time = draw(st.one_of(st.just(-1), st.integers(0, 2**42)))
            message = draw(st.none() | _TEXT)
            errors = [(draw(_I32), draw(st.none() | _TEXT)) for _ in range(draw(st.integers(0, 3)))]
            parts_kio.append(shapes.make(
                "PartitionProduceResponse", index=index, error_code=code, base_offset=base,
                log_append_time=append_time, log_start_offset=start, error_message=message,
                record_errors=[shapes.make("BatchIndexAndErrorMessage", batch_index=i, batch_index_error_message=m)
                               for i, m in errors] if version >= 8 else []))
            parts_ours.append(produce_codec.PartitionProduced(
                index, code.value, base, append_time, start, message,
                tuple(produce_codec.RecordErrorOut(i, m) for i, m in errors)))
        name = draw(_TEXT)
        topics_kio.append(shapes.make("TopicProduceResponse", name=name, partition_responses=parts_kio))
        topics_ours.append(produce_codec.TopicProduced(name, parts_ours))
    return (shapes.make("ProduceResponse", responses=topics_kio, throttle_time=0),
            produce_codec.ProduceAnswer(topics_ours))


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=60, deadline=None)
@given(data=st.data(), correlation_id=_I32)
def test_the_handlers_answers_encode_as_kio_writes_the_same_response(version: int, data: st.DataObject,
                                                                      correlation_id: int) -> None:
    kio, ours = data.draw(answers(version))
    encoded = produce_codec.encode_response(correlation_id, ours, version)
    assert encoded is not None and bytes(encoded) == _kio_frame(correlation_id, kio)


def test_huge_declared_counts_are_refused_before_decoding() -> None:
    """The bounds check exists for this: a count of two billion must never reach kio's native reader."""
    legacy = struct.pack(">hhi", -1, 1, 30_000) + struct.pack(">i", 2**31 - 1)
    with pytest.raises(HeaderError, match="array of"):
        produce_codec.parse_request(legacy, 0, 8)
    flexible = b"\x00" + struct.pack(">hi", 1, 30_000) + b"\xff\xff\xff\xff\x07"
    with pytest.raises(HeaderError, match="array of"):
        produce_codec.parse_request(flexible, 0, 9)
