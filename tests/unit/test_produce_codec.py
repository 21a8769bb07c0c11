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


# -- the single-partition fast paths (issue 33) -----------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_the_single_partition_reader_reads_what_the_general_walk_reads_or_steps_aside(version: int,
                                                                                        data: st.DataObject) -> None:
    """`_parse_single` either reads a body exactly as `_parse_general` does or returns None (then the general walk
    decides); it never accepts a body the general walk refuses, mutated or truncated ones included."""
    body = data.draw(request_bodies(version))
    flexible = version >= produce_codec.FLEXIBLE_FROM
    mutated = bytearray(body[: data.draw(st.integers(0, len(body)))] if data.draw(st.booleans()) else body)
    for _ in range(data.draw(st.integers(0, 2))):
        if mutated:
            mutated[data.draw(st.integers(0, len(mutated) - 1))] = data.draw(st.integers(0, 255))
    for frame in (body, bytes(mutated)):
        single = produce_codec._parse_single(frame, 0, flexible)
        try:
            general = produce_codec._parse_general(frame, 0, version)
        except HeaderError:
            assert single is None
            continue
        assert single is None or single == general
        assert produce_codec.parse_request(frame, 0, version) == general


@pytest.mark.parametrize("version", VERSIONS)
def test_a_producers_single_partition_request_takes_the_fast_path(version: int) -> None:
    shapes = messages.request_shapes(0, version)
    for transactional_id in (None, "txn"):
        request = shapes.make("ProduceRequest", transactional_id=transactional_id, acks=1, timeout=30_000,
                              topic_data=[shapes.make("TopicProduceData", name="requests", partition_data=[
                                  shapes.make("PartitionProduceData", index=3, records=b"r" * 300)])])
        body = messages.encode(request)
        single = produce_codec._parse_single(body, 0, version >= produce_codec.FLEXIBLE_FROM)
        assert single == produce_codec.ProduceRequest(transactional_id, 1, 30_000, [
            produce_codec.TopicData("requests", [produce_codec.PartitionData(3, b"r" * 300)])])


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=100, deadline=None)
@given(correlation_id=_I32, name=st.text(max_size=130), index=_I32, code=st.sampled_from(list(ErrorCode)),
       base=_I64, append_time=st.one_of(st.just(-1), st.integers(0, 2**42)), start=_I64,
       throttle=st.integers(0, 2**31 - 1))
def test_the_cached_single_partition_layout_writes_the_generic_encoders_bytes(
        version: int, correlation_id: int, name: str, index: int, code: ErrorCode, base: int, append_time: int,
        start: int, throttle: int) -> None:
    answer = produce_codec.ProduceAnswer([produce_codec.TopicProduced(name, [produce_codec.PartitionProduced(
        index, code.value, base, append_time, start)])], throttle)
    generic = produce_codec.encode_response(correlation_id, answer, version)
    assert generic is not None
    single = produce_codec._encode_single(correlation_id, answer, version)
    if single is not None:
        assert single == bytes(generic)
    else:  # only names the one-byte length of the cached layout cannot hold
        assert len(name.encode()) >= 0x7F
    assert bytes(produce_codec.encode_answer(correlation_id, answer, version)) == bytes(generic)  # type: ignore[arg-type]


def test_answers_the_cached_layout_does_not_cover_go_the_generic_way() -> None:
    partition = produce_codec.PartitionProduced(0, 0, 5, -1, 0)
    with_message = produce_codec.PartitionProduced(0, 87, error_message="bad", record_errors=(
        produce_codec.RecordErrorOut(0, "bad record"),))
    for answer in (produce_codec.ProduceAnswer([produce_codec.TopicProduced("t", [partition, partition])]),
                   produce_codec.ProduceAnswer([produce_codec.TopicProduced("t", [with_message])]),
                   produce_codec.ProduceAnswer([produce_codec.TopicProduced("a", [partition]),
                                                produce_codec.TopicProduced("b", [partition])])):
        for version in VERSIONS:
            assert produce_codec._encode_single(1, answer, version) is None
            assert bytes(produce_codec.encode_answer(1, answer, version)) == bytes(  # type: ignore[arg-type]
                produce_codec.encode_response(1, answer, version))  # type: ignore[arg-type]
