"""What a metadata snapshot of a big image costs, and how long it stalls the event loop.

A lone voter (real RaftDriver over a real FileRaftLog in a temp dir) holds an image of `--topics` topics with
`--partitions` partitions each (RF 3, two configs per topic). Its `SnapshotGenerator` then writes a snapshot as it
does in a broker (image copy, records encoded a slice at a time on the loop, write + fsync + drop of the log
prefix) while a ticker measures the loop's worst stall. Then, as at start, the snapshot is decoded and loaded into
the controller's image (`QuorumController.load_snapshot`), which happens before the broker serves.
Print `uptime` with the figures (the script prints the load average).

    .venv/bin/python benchmarks/metadata_snapshot.py [--topics 1000] [--partitions 10]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bus.controller.controller import QuorumController
from bus.controller.image import PartitionState, partition_record
from bus.controller.metadata_log.entry_codec import decode_entry
from bus.controller.metadata_log.quorum import RaftMetadataLog
from bus.controller.metadata_log.record_log import MetadataRecord
from bus.controller.snapshot_generator import SnapshotPolicy
from bus.raft.config import QuorumConfig
from bus.raft.driver import RaftDriver
from bus.raft.file_raft_log import FileRaftLog
from bus.raft.quorum_state import FileQuorumStateStore


def history(topics: int, partitions: int) -> list[MetadataRecord]:
    records: list[MetadataRecord] = [{"type": "cluster", "cluster_id": "MkU3OEVBNTcwNTJENDM2Qg"}]
    records += [{"type": "broker", "id": b, "endpoints": [["PLAINTEXT", "127.0.0.1", 9090 + b]], "rack": None}
                for b in (1, 2, 3)]
    for t in range(topics):
        name, topic_id = f"topic-{t:05d}", str(uuid.uuid4())
        records.append({"type": "topic", "name": name, "topic_id": topic_id})
        records += [{"type": "config", "name": name, "key": "retention.ms", "value": "86400000"},
                    {"type": "config", "name": name, "key": "cleanup.policy", "value": "delete"}]
        for p in range(partitions):
            replicas = [1 + (t + p + i) % 3 for i in range(3)]
            records.append(partition_record(topic_id, PartitionState(p, replicas, replicas, replicas[0], 2, 5)))
    return records


def lone_voter(directory: Path) -> tuple[RaftDriver, RaftMetadataLog, QuorumController]:
    raft_log = FileRaftLog(directory)
    driver = RaftDriver(1, QuorumConfig(voters=frozenset({1})), {1: ("127.0.0.1", 1)}, raft_log,
                        FileQuorumStateStore(directory), "MkU3OEVBNTcwNTJENDM2Qg")
    driver.stop_callbacks.append(raft_log.close)
    metadata_log = RaftMetadataLog(driver, snapshot_policy=SnapshotPolicy(max_bytes=2**62, max_interval_ms=0))
    return driver, metadata_log, QuorumController(metadata_log, 1, 1, 1)


async def worst_stall(until_done: asyncio.Event) -> float:
    worst = 0.0
    last = time.perf_counter()
    while not until_done.is_set():
        await asyncio.sleep(0)
        now = time.perf_counter()
        worst, last = max(worst, now - last), now
    return worst * 1000


async def measure(directory: Path, topics: int, partitions: int) -> None:
    driver, metadata_log, controller = lone_voter(directory)
    await driver.start()
    controller.import_records(history(topics, partitions))  # one entry, committed at once
    generator = metadata_log.snapshots
    assert generator is not None
    done = asyncio.Event()
    ticker = asyncio.create_task(worst_stall(done))
    await asyncio.sleep(0.05)
    start = time.perf_counter()
    generator.policy.max_bytes = 1
    generator.applied(driver.high_watermark, 1)  # as after the next commit: due now
    while generator.written == 0:
        await asyncio.sleep(0.001)
    elapsed = (time.perf_counter() - start) * 1000
    done.set()
    stall = await ticker
    snapshot = driver.latest_snapshot()
    assert snapshot is not None

    start = time.perf_counter()
    controller.load_snapshot(decode_entry(snapshot.data))
    load = (time.perf_counter() - start) * 1000
    await driver.stop()
    print(f"image: {topics} topics x {partitions} partitions, snapshot {len(snapshot.data) / 1e6:.2f} MB")
    print(f"snapshot written in {elapsed:.0f} ms; the loop's worst stall meanwhile {stall:.1f} ms")
    print(f"start-up: decode + load into the image {load:.0f} ms")
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(measure(Path(tmp), args.topics, args.partitions))


if __name__ == "__main__":
    main()
