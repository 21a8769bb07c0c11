"""Record-batch compression codecs, by Kafka's attribute id.

Only the cleaner, tests and timestamp look-ups decompress; the produce and fetch paths move compressed
batches untouched. Snappy needs care: Java producers write xerial-framed snappy while librdkafka writes a
raw snappy block, and every Kafka client reads both, so we read both and write the Java framing.
"""

import struct

import cramjam

NONE = 0
GZIP = 1
SNAPPY = 2
LZ4 = 3
ZSTD = 4

CODEC_NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}

# xerial snappy-java framing: magic, then version and minimum compatible version (both 1), then blocks
# of (big-endian i32 length, raw snappy block).
XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
# snappy-java's default block size; a Java consumer allocates buffers from it.
_XERIAL_BLOCK = 32 * 1024
_I32 = struct.Struct(">i")

Buffer = bytes | bytearray | memoryview


class UnsupportedCompressionError(ValueError):
    """A codec id Kafka does not define (attributes bits 0-2 above 4)."""


class DecompressionError(ValueError):
    """Compressed bytes that do not decode; callers report it as a corrupt record."""


def compress(codec: int, data: Buffer) -> bytes:
    """Compress `data` in the byte layout Kafka's own producer would write for `codec`."""
    if codec == NONE:
        return bytes(data)
    if codec == GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec == SNAPPY:
        return _xerial_compress(memoryview(data))
    if codec == LZ4:
        return bytes(cramjam.lz4.compress(data))
    if codec == ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise UnsupportedCompressionError(f"unknown compression codec id {codec}")


def decompress(codec: int, data: Buffer) -> bytes:
    """Decompress a batch's records section, whichever framing the producer used."""
    if codec == NONE:
        return bytes(data)
    try:
        if codec == GZIP:
            return bytes(cramjam.gzip.decompress(data))
        if codec == SNAPPY:
            return _snappy_decompress(memoryview(data))
        if codec == LZ4:
            return bytes(cramjam.lz4.decompress(data))
        if codec == ZSTD:
            return bytes(cramjam.zstd.decompress(data))
    except cramjam.DecompressionError as exc:
        raise DecompressionError(f"{CODEC_NAMES[codec]} data does not decompress: {exc}") from exc
    raise UnsupportedCompressionError(f"unknown compression codec id {codec}")


def _xerial_compress(data: memoryview) -> bytes:
    out = bytearray(_XERIAL_HEADER)
    for start in range(0, len(data), _XERIAL_BLOCK):
        block = cramjam.snappy.compress_raw(data[start : start + _XERIAL_BLOCK])
        out += _I32.pack(len(block))
        out += block
    return bytes(out)


def _snappy_decompress(data: memoryview) -> bytes:
    if len(data) < len(_XERIAL_HEADER) or data[: len(XERIAL_MAGIC)] != XERIAL_MAGIC:
        return bytes(cramjam.snappy.decompress_raw(data))
    out = bytearray()
    pos = len(_XERIAL_HEADER)
    while pos < len(data):
        if pos + 4 > len(data):
            raise DecompressionError("xerial snappy block length is truncated")
        (size,) = _I32.unpack_from(data, pos)
        pos += 4
        if size < 0 or pos + size > len(data):
            raise DecompressionError(f"xerial snappy block of {size} bytes overruns the data")
        out += cramjam.snappy.decompress_raw(data[pos : pos + size])
        pos += size
    return bytes(out)
