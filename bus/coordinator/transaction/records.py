"""`__transaction_state` records in Kafka's binary format (TransactionLogKey v0 / TransactionLogValue v0)."""

from __future__ import annotations

import struct

from bus.coordinator.transaction.state import TxnMetadata, TxnState

_KEY = struct.Struct(">hh")
_VALUE_HEAD = struct.Struct(">hqhib")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_TIMES = struct.Struct(">qq")


def _string(text: str) -> bytes:
    data = text.encode()
    return _I16.pack(len(data)) + data


def encode_key(transactional_id: str) -> bytes:
    return _I16.pack(0) + _string(transactional_id)


def decode_key(data: bytes) -> str:
    version, length = _KEY.unpack_from(data, 0)
    if version != 0:
        raise ValueError(f"unknown transaction log key version {version}")
    return data[4 : 4 + length].decode()


def encode_value(md: TxnMetadata) -> bytes:
    out = bytearray(_VALUE_HEAD.pack(0, md.producer_id, md.producer_epoch, md.timeout_ms, md.state))
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(md.partitions):
        by_topic.setdefault(topic, []).append(partition)
    if md.state in (TxnState.EMPTY, TxnState.DEAD):
        out += _I32.pack(-1)
    else:
        out += _I32.pack(len(by_topic))
        for topic, partitions in by_topic.items():
            out += _string(topic) + _I32.pack(len(partitions))
            out += b"".join(_I32.pack(p) for p in partitions)
    out += _TIMES.pack(md.last_update_ms, md.start_ms)
    return bytes(out)


def decode_value(transactional_id: str, data: bytes) -> TxnMetadata:
    _version, producer_id, epoch, timeout, state = _VALUE_HEAD.unpack_from(data, 0)
    pos = _VALUE_HEAD.size
    (topics,) = _I32.unpack_from(data, pos)
    pos += 4
    partitions: set[tuple[str, int]] = set()
    for _ in range(max(topics, 0)):
        (length,) = _I16.unpack_from(data, pos)
        topic = data[pos + 2 : pos + 2 + length].decode()
        pos += 2 + length
        (count,) = _I32.unpack_from(data, pos)
        pos += 4
        for _ in range(count):
            partitions.add((topic, _I32.unpack_from(data, pos)[0]))
            pos += 4
    last_update, start = _TIMES.unpack_from(data, pos)
    return TxnMetadata(transactional_id, producer_id, epoch, timeout, TxnState(state), partitions, start, last_update)
