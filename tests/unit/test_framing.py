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
