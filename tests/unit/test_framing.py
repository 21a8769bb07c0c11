import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bus.protocol.framing import FrameDecoder, FrameError, frame


def test_frames_split_across_reads():
    stream = frame(b"abc") + frame(b"") + frame(b"x" * 1000)
    decoder = FrameDecoder(10_000)
    out = []
    for i in range(0, len(stream), 7):
        out += decoder.feed(stream[i : i + 7])
    assert out == [b"abc", b"", b"x" * 1000]
    assert decoder.buffered == 0


def test_oversized_and_negative_frames_are_refused():
    with pytest.raises(FrameError, match=r"socket\.request\.max\.bytes"):
        FrameDecoder(100).feed(struct.pack(">i", 101))
    with pytest.raises(FrameError, match="invalid frame size"):
        FrameDecoder(100).feed(struct.pack(">i", -1))


@given(st.lists(st.binary(max_size=300), max_size=20), st.integers(min_value=1, max_value=50))
def test_any_chunking_yields_the_same_frames(payloads, chunk):
    stream = b"".join(frame(p) for p in payloads)
    decoder = FrameDecoder(1000)
    out = []
    for i in range(0, len(stream), chunk):
        out += decoder.feed(stream[i : i + chunk])
    assert out == payloads


def test_a_read_of_exactly_one_frame_is_that_frame_and_leaves_nothing_behind():
    """The usual read (one whole request) takes a shortcut; it must answer as the general split does."""
    decoder = FrameDecoder(100)
    assert decoder.feed(frame(b"abc")) == [b"abc"]
    assert decoder.feed(frame(b"")) == [b""]
    assert decoder.buffered == 0
    assert decoder.feed(frame(b"x" * 100)) == [b"x" * 100]
    with pytest.raises(FrameError, match=r"socket\.request\.max\.bytes"):
        decoder.feed(frame(b"x" * 101))
    with pytest.raises(FrameError, match="invalid frame size"):
        FrameDecoder(100).feed(struct.pack(">i", -4) + b"")
    partial = FrameDecoder(100)  # a frame after a partial one: the buffer still comes first
    assert partial.feed(frame(b"ab")[:3]) == []
    assert partial.feed(frame(b"ab")[3:] + frame(b"cd")) == [b"ab", b"cd"]
