"""Codec round trips and the snappy framings real producers send."""

from __future__ import annotations

import struct

import cramjam
import pytest

from bus.protocol import compression as c

DATA = b"".join(b"record-%06d:" % i + bytes(range(i % 200)) for i in range(3000))  # ~330 KB, several blocks


@pytest.mark.parametrize("codec", [c.NONE, c.GZIP, c.SNAPPY, c.LZ4, c.ZSTD])
@pytest.mark.parametrize("data", [b"", b"x", DATA], ids=["empty", "one-byte", "large"])
def test_round_trip(codec: int, data: bytes) -> None:
    assert c.decompress(codec, c.compress(codec, data)) == data


def test_snappy_writes_xerial_framing_with_32k_blocks() -> None:
    packed = c.compress(c.SNAPPY, DATA)
    assert packed.startswith(c.XERIAL_MAGIC + struct.pack(">ii", 1, 1))
    first_block = struct.unpack_from(">i", packed, 16)[0]
    assert bytes(cramjam.snappy.decompress_raw(packed[20 : 20 + first_block])) == DATA[: 32 * 1024]


def test_snappy_reads_raw_blocks_as_librdkafka_writes_them() -> None:
    raw = bytes(cramjam.snappy.compress_raw(DATA))
    assert c.decompress(c.SNAPPY, raw) == DATA


def test_snappy_reads_a_hand_built_xerial_stream() -> None:
    """Java's SnappyOutputStream: magic, version 1, compatible version 1, then length-prefixed raw blocks."""
    parts = [b"hello, ", b"xerial ", b"snappy" * 1000]
    stream = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    for part in parts:
        block = bytes(cramjam.snappy.compress_raw(part))
        stream += struct.pack(">i", len(block)) + block
    assert c.decompress(c.SNAPPY, stream) == b"".join(parts)


@pytest.mark.parametrize(
    "bad",
    [
        b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + b"\x00\x00",
        b"\x82SNAPPY\x00" + struct.pack(">iii", 1, 1, 99) + b"abc",
    ],
)
def test_truncated_xerial_stream_is_a_decompression_error(bad: bytes) -> None:
    with pytest.raises(c.DecompressionError):
        c.decompress(c.SNAPPY, bad)


def test_lz4_is_the_frame_format() -> None:
    packed = c.compress(c.LZ4, DATA)
    assert packed[:4] == b"\x04\x22\x4d\x18"  # LZ4 frame magic, which Kafka's KafkaLZ4BlockInputStream expects


def test_zstd_reads_streamed_frames_without_a_content_size() -> None:
    """zstd-jni (Java) streams frames that do not declare their decompressed size."""
    compressor = cramjam.zstd.Compressor()
    compressor.compress(DATA)
    assert c.decompress(c.ZSTD, bytes(compressor.finish())) == DATA


@pytest.mark.parametrize("codec", [c.GZIP, c.SNAPPY, c.LZ4, c.ZSTD])
def test_garbage_is_a_decompression_error(codec: int) -> None:
    with pytest.raises(c.DecompressionError):
        c.decompress(codec, b"\x00\x01not compressed at all\xff" * 3)


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codec_ids(codec: int) -> None:
    with pytest.raises(c.UnsupportedCompressionError):
        c.compress(codec, b"x")
    with pytest.raises(c.UnsupportedCompressionError):
        c.decompress(codec, b"x")


def _bomb(codec: int, inflated: int) -> bytes:
    return c.compress(codec, bytes(inflated))


@pytest.mark.parametrize("codec", [c.GZIP, c.SNAPPY, c.LZ4, c.ZSTD])
def test_inflating_past_the_limit_is_a_decompression_error(codec: int) -> None:
    packed = _bomb(codec, 1 << 20)
    assert c.decompress(codec, packed, limit=1 << 20) == bytes(1 << 20)
    with pytest.raises(c.DecompressionError, match="limit"):
        c.decompress(codec, packed, limit=(1 << 20) - 1)


def test_raw_snappy_block_is_refused_by_its_declared_length() -> None:
    raw = bytes(cramjam.snappy.compress_raw(bytes(100_000)))
    with pytest.raises(c.DecompressionError, match="100000 bytes declared"):
        c.decompress(c.SNAPPY, raw, limit=99_999)


def test_zstd_bomb_of_gigabytes_stops_at_the_limit_quickly() -> None:
    """~1 MB of zstd frames that would inflate to ~30 GB: refused after writing at most limit + 1 bytes."""
    import time

    frame = c.compress(c.ZSTD, bytes(64 << 20))
    bomb = frame * (1_000_000 // len(frame))
    started = time.perf_counter()
    with pytest.raises(c.DecompressionError, match="limit"):
        c.decompress(c.ZSTD, bomb)
    assert time.perf_counter() - started < 2.0


@pytest.mark.parametrize("codec", [c.GZIP, c.LZ4, c.ZSTD])
def test_bounded_path_grows_its_buffer_for_highly_compressible_data(codec: int) -> None:
    """Input large enough to take the bounded path, output many times the first buffer guess."""
    data = bytes(8 << 20) + DATA
    assert c.decompress(codec, c.compress(codec, data), limit=16 << 20) == data


@pytest.mark.parametrize("codec", [c.GZIP, c.LZ4, c.ZSTD])
def test_garbage_on_the_bounded_path_is_a_decompression_error(codec: int) -> None:
    with pytest.raises(c.DecompressionError):
        c.decompress(codec, b"\x00\x01not compressed at all\xff" * 3, limit=16)
