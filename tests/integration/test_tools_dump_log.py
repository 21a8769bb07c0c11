"""`bus dump-log` on the files a broker process wrote: the records confluent-kafka produced, batch by batch.

The segment's dump must hold every produced record (offsets, keys, payloads, header keys), its batches must
add up to the record count, and every entry of the offset index must point at a batch the dump shows at that
position. Snapshot files are written with the raft snapshot writer; bad files exit 1 with one line.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient as ConfluentAdmin
from confluent_kafka.admin import NewTopic

from bus.raft.replicated_log import OffsetAndEpoch, Snapshot
from bus.raft.snapshots import encode, snapshot_path
from deploy.processes.broker import BrokerProcess
from tests.integration._support_tools import bus, ok, unique

PLAIN, COMPRESSED = 40, 10
VALUE = "x" * 300  # 40 records of 300 bytes: more than index.interval.bytes (4096), so the index has entries
BATCH = re.compile(r"baseOffset: (\d+) lastOffset: (\d+) count: (\d+) baseSequence: -?\d+ lastSequence: -?\d+ "
                   r"producerId: -?\d+ producerEpoch: -?\d+ partitionLeaderEpoch: \d+ isTransactional: false "
                   r"isControl: false deleteHorizonMs: OptionalLong.empty position: (\d+) CreateTime: \d+ "
                   r"size: \d+ magic: 2 compresscodec: (\w+) crc: \d+ isvalid: true")
RECORD = re.compile(r"\| offset: (\d+) CreateTime: \d+ keySize: (-?\d+) valueSize: (\d+) sequence: -?\d+ "
                    r"headerKeys: \[(.*)\](?: key: (\S+))? payload: (.*)")


@pytest.fixture(scope="module")
def segment(shared_broker: BrokerProcess) -> Path:
    """The one segment of a partition: PLAIN records one per batch, then COMPRESSED in gzip batches."""
    name = unique("tools-dump")
    admin = ConfluentAdmin({"bootstrap.servers": shared_broker.bootstrap})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(timeout=10)
    producer = Producer({"bootstrap.servers": shared_broker.bootstrap, "linger.ms": 0})
    for i in range(PLAIN):
        producer.produce(name, key=f"k{i}", value=f"{i}-{VALUE}", headers=[("h1", b"a"), ("h2", None)])
        producer.flush(10)
    gzip = Producer({"bootstrap.servers": shared_broker.bootstrap, "linger.ms": 50, "compression.type": "gzip"})
    for i in range(PLAIN, PLAIN + COMPRESSED):
        gzip.produce(name, value=f"{i}-{VALUE}")
    assert gzip.flush(10) == 0
    return shared_broker.data_dir / f"{name}-0" / "00000000000000000000.log"


def dump(*args: str):  # type: ignore[no-untyped-def]
    return bus("dump-log", *args)


def test_segment_holds_the_produced_records(segment: Path) -> None:
    lines = ok(dump("--files", str(segment), "--print-data-log")).splitlines()
    assert lines[:2] == [f"Dumping {segment}", "Log starting offset: 0"]
    batches = [BATCH.fullmatch(line) for line in lines if line.startswith("baseOffset:")]
    records = [RECORD.fullmatch(line) for line in lines if line.startswith("|")]
    assert all(batches) and all(records), [line for line in lines[2:] if not (BATCH.fullmatch(line) or
                                                                               RECORD.fullmatch(line))]
    assert sum(int(b[3]) for b in batches if b) == PLAIN + COMPRESSED == len(records)
    assert {b[5] for b in batches if b} == {"none", "gzip"}
    assert [int(r[1]) for r in records if r] == list(range(PLAIN + COMPRESSED))
    assert [r[6] for r in records if r] == [f"{i}-{VALUE}" for i in range(PLAIN + COMPRESSED)]
    plain = [r for r in records if r][:PLAIN]
    assert [(r[2], r[4], r[5]) for r in plain] == [(str(len(f"k{i}")), "h1,h2", f"k{i}") for i in range(PLAIN)]
    assert len(lines) == 2 + len(batches) + len(records)


def test_shallow_and_deep_iteration(segment: Path) -> None:
    shallow = ok(dump("--files", str(segment))).splitlines()
    assert not any(line.startswith("|") for line in shallow)
    deep = ok(dump("--files", str(segment), "--deep-iteration")).splitlines()
    records = [line for line in deep if line.startswith("|")]
    assert len(records) == PLAIN + COMPRESSED
    assert not any("payload:" in line for line in records)


def test_offset_index_points_at_batches(segment: Path) -> None:
    log_lines = ok(dump("--files", str(segment))).splitlines()
    batches = {(int(m[2]), int(m[4])) for m in map(BATCH.fullmatch, log_lines) if m}  # (lastOffset, position)
    index = segment.with_suffix(".index")
    time_index = segment.with_suffix(".timeindex")
    out = ok(dump("--files", f"{index},{time_index}")).splitlines()
    split = out.index(f"Dumping {time_index}")
    assert out[0] == f"Dumping {index}"
    entries = [re.fullmatch(r"offset: (\d+) position: (\d+)", line) for line in out[1:split]]
    assert entries and all(entries)
    assert {(int(e[1]), int(e[2])) for e in entries if e} <= batches
    times = [re.fullmatch(r"timestamp: (\d+) offset: (\d+)", line) for line in out[split + 1:]]
    assert times and all(times)


def test_snapshot_file(tmp_path: Path) -> None:
    path = snapshot_path(tmp_path, OffsetAndEpoch(epoch=3, offset=42))
    path.write_bytes(encode(Snapshot(OffsetAndEpoch(epoch=3, offset=42), b"image-bytes")))
    assert ok(dump("--files", str(path))).splitlines() == [
        f"Dumping {path}", "Snapshot end offset: 42 epoch: 3 size: 11 isvalid: true"]
    path.write_bytes(path.read_bytes()[:-1] + b"?")
    result = dump("--files", str(path))
    assert result.returncode == 1
    assert result.stderr.strip() == f"snapshot {path} is corrupt (CRC-32C mismatch); refusing to load it"


def test_bad_files_exit_1_with_one_line(segment: Path, tmp_path: Path) -> None:
    missing = tmp_path / "00000000000000000000.log"
    result = dump("--files", str(missing))
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr.strip() == f"Cannot read {missing}: No such file or directory"

    other = segment.parent.parent / "meta.properties"
    result = dump("--files", str(other))
    assert result.returncode == 1 and result.stderr.startswith(f"Ignoring unknown file {other}")
    assert len(result.stderr.strip().splitlines()) == 1

    garbage = tmp_path / "00000000000000000007.log"
    garbage.write_bytes(b"this is not a record batch, just text" * 3)
    result = dump("--files", f"{garbage},{segment}")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip() == f"{garbage} is not a log segment: no record batch at its start"
    assert f"Dumping {segment}" in result.stdout  # the good file is still dumped

    result = dump("--print-data-log")
    assert result.returncode == 1 and "--files" in result.stderr


def test_torn_tail_is_reported_like_kafka(segment: Path, tmp_path: Path) -> None:
    torn = tmp_path / segment.name
    torn.write_bytes(segment.read_bytes() + b"\0\0\0")
    out = ok(dump("--files", str(torn)))
    assert out.splitlines()[-1] == f"Found 3 invalid bytes at the end of {torn.name}"
