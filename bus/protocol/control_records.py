"""Transaction markers: the control records that end a transaction in every partition it wrote to.

Kafka's EndTransactionMarker: key = (version int16, type int16: 0 abort, 1 commit), value = (version
int16, coordinator epoch int32), in a batch with the control and transactional attributes set.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from bus.protocol.records import BatchInfo, Record, build_batch, iter_records

_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")
ABORT = 0
COMMIT = 1


@dataclass(frozen=True, slots=True)
class Marker:
    commit: bool
    coordinator_epoch: int


def marker_batch(producer_id: int, epoch: int, commit: bool, coordinator_epoch: int, timestamp: int) -> bytes:
    record = Record(offset=0, timestamp=timestamp, key=_KEY.pack(0, COMMIT if commit else ABORT),
                    value=_VALUE.pack(0, coordinator_epoch), headers=())
    return build_batch([record], base_offset=0, producer_id=producer_id, producer_epoch=epoch,
                       is_transactional=True, is_control=True)


def read_marker(data: bytes | bytearray | memoryview, batch: BatchInfo) -> Marker | None:
    """The commit/abort marker in a control batch; None for other control records (leader change, ...)."""
    for record in iter_records(data, batch):
        if record.key is None or len(record.key) < _KEY.size:
            continue
        _version, kind = _KEY.unpack_from(record.key)
        if kind not in (ABORT, COMMIT):
            continue
        coordinator_epoch = -1
        if record.value is not None and len(record.value) >= _VALUE.size:
            _version, coordinator_epoch = _VALUE.unpack_from(record.value)
        return Marker(kind == COMMIT, coordinator_epoch)
    return None
