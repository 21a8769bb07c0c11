"""Record-batch compression codecs, by Kafka's attribute id.

The fetch path moves compressed batches untouched, and so does produce, except where Kafka's own
LogValidator inflates too: a compacted topic checks every record has a key, and a topic whose
`compression.type` differs from the producer's codec re-encodes the batch (a large batch is inflated in
a worker thread, `Partition.prepare`). The cleaner, timestamp look-ups, coordinators and clients
decompress as well.

Decompression is bounded. A produced batch is at most `message.max.bytes` compressed, but a zstd frame of
zeros inflates about 32,000-fold, so one 1 MB batch could ask for 30 GB. Kafka streams records out of the
codec one at a time; we inflate a batch's records section whole, so `decompress` stops at `limit` bytes
(default `MAX_INFLATED_BYTES`) and raises `DecompressionError`, which the broker answers as
CORRUPT_MESSAGE. The codec only ever writes into a buffer of at most `limit + 1` bytes.

Snappy needs care: Java producers write xerial-framed snappy while librdkafka writes a raw snappy block,
and every Kafka client reads both, so we read both and write the Java framing.
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

# 64 MiB: 64 times the default message.max.bytes. Real record data compresses 3-30-fold (logs and JSON
# at the top of that range), so a legitimate batch of the default size stays far below; a batch that
# inflates further is a decompression bomb, or holds more records than one produce should make the
# broker decode.
MAX_INFLATED_BYTES = 64 << 20

# The most each codec can inflate one input byte (zstd's RLE blocks: 128 KiB from 4 bytes; deflate's
# 258-byte matches in ~2 bits; lz4's 255-per-byte length extensions): an input this much smaller than
# the limit cannot exceed it, and takes the plain, one-allocation path.
_MAX_RATIO = {GZIP: 1032, LZ4: 256, ZSTD: 32768}
# First output buffer for the bounded path, as a multiple of the input, and the growth factor after.
_FIRST_GUESS = 8
_GROWTH = 4


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


_MODULES = {GZIP: cramjam.gzip, LZ4: cramjam.lz4, ZSTD: cramjam.zstd}


def decompress(codec: int, data: Buffer, limit: int = MAX_INFLATED_BYTES) -> bytes:
    """Decompress a batch's records section, whichever framing the producer used, to at most `limit` bytes."""
    if codec == NONE:
        return bytes(data)
    try:
        if codec == SNAPPY:
            return _snappy_decompress(memoryview(data), limit)
        module = _MODULES.get(codec)
        if module is not None:
            if len(data) * _MAX_RATIO[codec] <= limit:
                return bytes(module.decompress(data))
            return _bounded(module, codec, data, limit)
    except cramjam.DecompressionError as exc:
        raise DecompressionError(f"{CODEC_NAMES[codec]} data does not decompress: {exc}") from exc
    raise UnsupportedCompressionError(f"unknown compression codec id {codec}")


def _bounded(module: object, codec: int, data: Buffer, limit: int) -> bytes:
    """Inflate into buffers that grow geometrically up to `limit + 1` bytes.

    cramjam's `decompress_into` stops when the buffer is full and fails; that is the bound. A smaller
    buffer that fills is retried larger (legitimate output costs at most a few percent more work), and a
    `limit + 1`-byte buffer that fills means the data inflates past the limit.
    """
    capacity = min(limit + 1, max(len(data) * _FIRST_GUESS, 1 << 16))
    while True:
        out = bytearray(capacity)
        try:
            written = module.decompress_into(data, out)  # type: ignore[attr-defined]
        except cramjam.DecompressionError:
            if capacity > limit:
                raise DecompressionError(
                    f"{CODEC_NAMES[codec]} data inflates past the limit of {limit} bytes or is corrupt"
                ) from None
            capacity = min(limit + 1, capacity * _GROWTH)
            continue
        if written > limit:
            raise DecompressionError(f"{CODEC_NAMES[codec]} data inflates past the limit of {limit} bytes")
        del out[written:]
        return bytes(out)


def _xerial_compress(data: memoryview) -> bytes:
    out = bytearray(_XERIAL_HEADER)
    for start in range(0, len(data), _XERIAL_BLOCK):
        block = cramjam.snappy.compress_raw(data[start : start + _XERIAL_BLOCK])
        out += _I32.pack(len(block))
        out += block
    return bytes(out)


def _snappy_block(block: memoryview, room: int) -> bytes:
    """A raw snappy block declares its length up front: refuse it before inflating if it exceeds `room`."""
    size = cramjam.snappy.decompress_raw_len(block)
    if size > room:
        raise DecompressionError(f"snappy data inflates past the limit ({size} bytes declared, {room} allowed)")
    return bytes(cramjam.snappy.decompress_raw(block))


def _snappy_decompress(data: memoryview, limit: int) -> bytes:
    if len(data) < len(_XERIAL_HEADER) or data[: len(XERIAL_MAGIC)] != XERIAL_MAGIC:
        return _snappy_block(data, limit)
    out = bytearray()
    pos = len(_XERIAL_HEADER)
    while pos < len(data):
        if pos + 4 > len(data):
            raise DecompressionError("xerial snappy block length is truncated")
        (size,) = _I32.unpack_from(data, pos)
        pos += 4
        if size < 0 or pos + size > len(data):
            raise DecompressionError(f"xerial snappy block of {size} bytes overruns the data")
        out += _snappy_block(data[pos : pos + size], limit - len(out))
        pos += size
    return bytes(out)
