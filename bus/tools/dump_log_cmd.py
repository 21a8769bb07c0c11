"""`bus dump-log`: print what a log segment, its indexes or a metadata snapshot hold, like kafka-dump-log.sh.

Reads the files the broker writes, offline and read-only: `.log` segments (one line per record batch in
DumpLogSegments' layout, `baseOffset: 0 lastOffset: 2 count: 3 ... isvalid: true`; with `--deep-iteration`
one `| offset: ...` line per record too, and with `--print-data-log` also its key and payload as UTF-8),
`.index` (`offset: N position: P`), `.timeindex` (`timestamp: T offset: N`), `.txnindex` (the aborted
transactions) and the KRaft metadata log's `.checkpoint` snapshots (their id and size: the image inside is the
controller's own encoding, not record batches). Batches are parsed by the log's own reader
(`bus.log.segment.read_batches`), index entries with the index classes' entry formats, snapshots by
`bus.raft.snapshots.decode`, so the tool sees exactly what the broker would.

Kafka skips a file it does not know with a message and exits 0; here a missing, unknown or unreadable file, or a
`.log` that does not start with a record batch, prints one line on stderr, the others are still dumped, and the
command exits 1. Invalid bytes after the last whole batch (a torn tail) are reported as Kafka reports them.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from bus.tools._common import ToolError, run_guarded

if TYPE_CHECKING:
    from bus.protocol.records import BatchInfo

Write = Callable[[str], object]
# Kafka's ControlRecordType ids: transaction markers, and the KRaft log's own control records.
CONTROL_TYPES = {0: "ABORT", 1: "COMMIT", 2: "LEADER_CHANGE", 3: "SNAPSHOT_HEADER", 4: "SNAPSHOT_FOOTER",
                 5: "KRAFT_VERSION", 6: "KRAFT_VOTERS"}
_KNOWN = (".log", ".index", ".timeindex", ".txnindex", ".checkpoint")


def add_parser(sub: argparse._SubParsersAction, name: str) -> None:
    p = sub.add_parser(name, help="Print the content of log segments, indexes and snapshots (kafka-dump-log).",
                       description="This tool helps to parse a log file and dump its contents to the console, "
                                   "useful for debugging a seemingly corrupt log segment.")
    p.add_argument("--files", required=True, metavar="FILES",
                   help="REQUIRED: The comma separated list of data and index log files to be dumped.")
    p.add_argument("--print-data-log", action="store_true",
                   help="If set, printing the messages content when dumping data logs. Automatically set if any "
                        "decoder option is specified.")
    p.add_argument("--deep-iteration", action="store_true",
                   help="If set, uses deep instead of shallow iteration. Automatically set if print-data-log is "
                        "enabled.")
    p.add_argument("--skip-record-metadata", action="store_true",
                   help="Whether to skip printing metadata for each record.")
    p.add_argument("--max-bytes", type=int, default=2**31 - 1, metavar="N",
                   help="Limit the amount of total batches read in bytes avoiding reading the whole .log file(s).")
    p.set_defaults(run=run, parser=p)


def run(args: argparse.Namespace) -> int:
    return run_guarded("dump-log", lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    paths = [Path(f.strip()) for f in args.files.split(",") if f.strip()]
    if not paths:
        raise ToolError("--files names no file")
    failed = False
    for path in paths:
        try:
            dump_file(path, args, sys.stdout.write)
        except ToolError as exc:
            sys.stdout.flush()
            print(str(exc), file=sys.stderr)
            failed = True
    return 1 if failed else 0


def dump_file(path: Path, args: argparse.Namespace, write: Write) -> None:
    suffix = path.suffix
    if suffix not in _KNOWN:
        raise ToolError(f"Ignoring unknown file {path}: not a .log, .index, .timeindex, .txnindex or .checkpoint "
                        "file")
    if path.exists() and not path.is_file():
        raise ToolError(f"Cannot read {path}: not a regular file")
    try:
        if suffix == ".log":
            fd = os.open(path, os.O_RDONLY)
            try:
                write(f"Dumping {path}\n")
                dump_segment(path, fd, args, write)
            finally:
                os.close(fd)
            return
        raw = path.read_bytes()
    except OSError as exc:
        raise ToolError(f"Cannot read {path}: {exc.strerror or exc}") from None
    write(f"Dumping {path}\n")
    dumpers = {".index": dump_offset_index, ".timeindex": dump_time_index, ".txnindex": dump_txn_index}
    dumpers.get(suffix, dump_snapshot)(path, raw, write)


def _base_offset(path: Path) -> int:
    """The segment's base offset from its 20-digit name, as Kafka takes it (0 for a file named otherwise)."""
    from bus.log import files

    for kind in (files.LOG, files.INDEX, files.TIME_INDEX, files.TXN_INDEX):
        base = files.base_offset_of(path.name, kind)
        if base is not None:
            return base
    return 0


def dump_segment(path: Path, fd: int, args: argparse.Namespace, write: Write) -> None:
    from bus.log.segment import read_batches
    from bus.protocol.compression import CODEC_NAMES
    from bus.protocol.records import CRC_OFFSET, LOG_APPEND_TIME, CorruptRecordError, scan_batches_prefix

    size = os.fstat(fd).st_size
    end = min(size, max(0, args.max_bytes))
    deep = args.deep_iteration or args.print_data_log
    write(f"Log starting offset: {_base_offset(path)}\n")
    valid_end = 0
    for position, chunk, batch in read_batches(fd, 0, end, verify_crc=False):
        start = batch.position
        valid = bool(scan_batches_prefix(memoryview(chunk)[start:start + batch.size], verify_crc=True)[0])
        crc = int.from_bytes(chunk[start + CRC_OFFSET:start + CRC_OFFSET + 4], "big")
        time_type = "LogAppendTime" if batch.timestamp_type == LOG_APPEND_TIME else "CreateTime"
        last_sequence = -1 if batch.base_sequence < 0 else batch.base_sequence + batch.last_offset_delta
        horizon = batch.delete_horizon_ms
        write(f"baseOffset: {batch.base_offset} lastOffset: {batch.last_offset} count: {batch.records_count} "
              f"baseSequence: {batch.base_sequence} lastSequence: {last_sequence} producerId: {batch.producer_id} "
              f"producerEpoch: {batch.producer_epoch} partitionLeaderEpoch: {batch.partition_leader_epoch} "
              f"isTransactional: {str(batch.is_transactional).lower()} isControl: {str(batch.is_control).lower()} "
              f"deleteHorizonMs: {'OptionalLong.empty' if horizon is None else f'OptionalLong[{horizon}]'} "
              f"position: {position} {time_type}: {batch.max_timestamp} size: {batch.size} magic: 2 "
              f"compresscodec: {CODEC_NAMES.get(batch.compression, batch.compression)} crc: {crc} "
              f"isvalid: {str(valid).lower()}\n")
        valid_end = position + batch.size
        if deep:
            try:
                _dump_records(chunk, batch, args, time_type, write)
            except CorruptRecordError as exc:
                raise ToolError(f"Corrupt batch at position {position} of {path}: {exc}") from None
    if valid_end == 0 and end > 0:
        raise ToolError(f"{path} is not a log segment: no record batch at its start")
    if end == size and valid_end < size:  # a torn tail: Kafka reports it and goes on
        write(f"Found {size - valid_end} invalid bytes at the end of {path.name}\n")


def _dump_records(chunk: bytes, batch: BatchInfo, args: argparse.Namespace, time_type: str, write: Write) -> None:
    from bus.protocol.control_records import ABORT, COMMIT
    from bus.protocol.records import iter_records

    for record in iter_records(chunk, batch):
        line = "| "
        if not args.skip_record_metadata:
            sequence = -1 if batch.base_sequence < 0 else batch.base_sequence + (record.offset - batch.base_offset)
            line += (f"offset: {record.offset} {time_type}: {record.timestamp} "
                     f"keySize: {-1 if record.key is None else len(record.key)} "
                     f"valueSize: {-1 if record.value is None else len(record.value)} sequence: {sequence} "
                     f"headerKeys: [{','.join(key for key, _ in record.headers)}]")
        if batch.is_control and record.key is not None and len(record.key) >= 4:
            kind = int.from_bytes(record.key[2:4], "big", signed=True)  # key: version int16, type int16
            if kind in (ABORT, COMMIT) and record.value is not None and len(record.value) >= 6:
                epoch = int.from_bytes(record.value[2:6], "big", signed=True)
                line += f" endTxnMarker: {'COMMIT' if kind == COMMIT else 'ABORT'} coordinatorEpoch: {epoch}"
            else:
                line += f" controlType: {CONTROL_TYPES.get(kind, 'UNKNOWN')}({kind})"
        elif args.print_data_log:
            if record.key is not None:
                line += f" key: {record.key.decode('utf-8', 'replace')}"
            payload = "" if record.value is None else record.value.decode("utf-8", "replace")
            line += f" payload: {payload}"
        write(line.rstrip() + "\n")


def _entries(path: Path, raw: bytes, entry_size: int, what: str) -> None:
    if len(raw) % entry_size:
        raise ToolError(f"{what} file {path} is corrupt, found {len(raw)} bytes which is not a multiple of "
                        f"{entry_size}")


def dump_offset_index(path: Path, raw: bytes, write: Write) -> None:
    from bus.log.index import OffsetIndex

    entry = OffsetIndex._ENTRY
    _entries(path, raw, entry.size, "Index")
    base = _base_offset(path)
    for relative, position in entry.iter_unpack(raw):
        write(f"offset: {base + relative} position: {position}\n")


def dump_time_index(path: Path, raw: bytes, write: Write) -> None:
    from bus.log.index import TimeIndex

    entry = TimeIndex._ENTRY
    _entries(path, raw, entry.size, "Time index")
    base = _base_offset(path)
    for timestamp, relative in entry.iter_unpack(raw):
        write(f"timestamp: {timestamp} offset: {base + relative}\n")


def dump_txn_index(path: Path, raw: bytes, write: Write) -> None:
    from bus.log import txn_index

    entry = txn_index._ENTRY
    _entries(path, raw, entry.size, "Transaction index")
    for version, producer_id, first, last, last_stable in entry.iter_unpack(raw):
        write(f"version: {version} producerId: {producer_id} firstOffset: {first} lastOffset: {last} "
              f"lastStableOffset: {last_stable}\n")


def dump_snapshot(path: Path, raw: bytes, write: Write) -> None:
    from bus.raft.snapshots import SnapshotError, decode

    try:
        snapshot = decode(path, raw)
    except SnapshotError as exc:
        raise ToolError(str(exc)) from None
    snapshot_id = snapshot.snapshot_id
    write(f"Snapshot end offset: {snapshot_id.offset} epoch: {snapshot_id.epoch} size: {len(snapshot.data)} "
          "isvalid: true\n")
