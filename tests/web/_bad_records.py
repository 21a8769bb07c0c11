"""Records no well-behaved producer writes, for the console's bus readers: each must set them aside (or show
them undecoded where a page shows raw messages), count them, and go on with the next record.
"""

from __future__ import annotations

import struct
import time

import crc32c
from prometheus_client.parser import text_string_to_metric_families

from bus.protocol import compression
from bus.protocol import records as rb

WRONG_SHAPES = (b"\xff\xfe\x00garbage, not UTF-8", b"[1, 2, 3]", b"42", b'{"unrelated": true}')
"""Garbage bytes, then JSON of the wrong shape: a list, a number, an object of unrelated keys."""
UNWRITABLE_JSON = (b"1" * 5000, b"[" * 100_000, b'{"plate": "\\ud800"}', b'{"speed": NaN}', b'{"speed": 1e400}')
"""What Python's JSON parser refuses with other errors than a syntax error (too many digits, too deep), or takes
but cannot write back as JSON (an unpaired surrogate, NaN, a number beyond a float)."""


def skipped_counts(metrics_text: str, reader: str) -> dict[tuple[str, str], float]:
    """``console_bus_records_skipped_total`` of one reader: (topic, reason) -> count."""
    return {(s.labels["topic"], s.labels["reason"]): s.value
            for family in text_string_to_metric_families(metrics_text) for s in family.samples
            if s.name == "console_bus_records_skipped_total" and s.labels["reader"] == reader}


def _sealed(batch: bytearray) -> bytes:
    """The batch with its length and CRC made right again after an edit (the broker checks both)."""
    struct.pack_into(">i", batch, 8, len(batch) - rb.LOG_OVERHEAD)
    struct.pack_into(">I", batch, rb.CRC_OFFSET, crc32c.crc32c(memoryview(batch)[rb.ATTRIBUTES_OFFSET:]))
    return bytes(batch)


def header_name_batch(name: bytes, key: bytes, value: bytes) -> bytes:
    """One record whose header name is ``name`` (Kafka clients only write UTF-8 names; the protocol carries bytes)."""
    placeholder = "\x01" * len(name)
    batch = bytearray(rb.build_batch([rb.Record(0, int(time.time() * 1000), key, value, ((placeholder, b"v"),))],
                                     base_offset=0))
    at = batch.index(placeholder.encode(), rb.BATCH_OVERHEAD)
    batch[at : at + len(name)] = name
    return _sealed(batch)


def undecompressible_batch(records: int) -> bytes:
    """A gzip batch of ``records`` records whose payload is not gzip (well-formed header, right CRC)."""
    batch = rb.build_batch([(i, int(time.time() * 1000), b"k", b"v") for i in range(records)], base_offset=0,
                           compression=compression.GZIP)
    return _sealed(bytearray(batch[: rb.BATCH_OVERHEAD]) + b"\x1f\x8b but not gzip after all")
