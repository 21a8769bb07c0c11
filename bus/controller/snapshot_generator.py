"""When and how a quorum node snapshots its committed metadata image (Kafka's SnapshotGenerator, on every node).

`SnapshotPolicy` decides when: once `metadata.log.max.record.bytes.between.snapshots` bytes of committed entries
were applied since the last snapshot, or `metadata.log.max.snapshot.interval.ms` passed since it with at least one
new entry (0 turns the time rule off). Process start counts as a snapshot, as in Kafka, so a restarted node does
not snapshot at once.

`SnapshotGenerator` does it: at the moment the policy says so, right after the entry that ends at `end` was
applied, it takes a copy of the image (`MetadataImage.copy`: dicts of shared, never-mutated states, a
few milliseconds for ten thousand partitions), so the snapshot describes exactly the offsets below `end` while the
image moves on. Building the records and their JSON, the costly part on a big image, then runs on the loop a
slice of `CHUNK_RECORDS` at a time, yielding between slices: a worker thread would not help, the JSON encoder
holds the GIL throughout. The raft log then keeps the snapshot (written, fsynced and renamed, like an append of the
log is) and drops its whole segments below it. One snapshot is written at a time; entries committed meanwhile count
toward the next.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from bus.controller.image import MetadataImage, snapshot_records
from bus.controller.metadata_log.entry_codec import encode_entry, encode_record, join_encoded
from bus.raft.driver import RaftDriver, RaftStoppedError

log = logging.getLogger(__name__)

DEFAULT_MAX_BYTES = 20971520  # Kafka's metadata.log.max.record.bytes.between.snapshots
DEFAULT_MAX_INTERVAL_MS = 3600000  # Kafka's metadata.log.max.snapshot.interval.ms
CHUNK_RECORDS = 500  # records encoded between two yields to the loop (a millisecond or two)


def _monotonic_ms() -> float:
    return time.monotonic() * 1000.0


class SnapshotPolicy:
    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES, max_interval_ms: int = DEFAULT_MAX_INTERVAL_MS,
                 clock: Callable[[], float] = _monotonic_ms) -> None:
        self.max_bytes = max_bytes
        self.max_interval_ms = max_interval_ms
        self._clock = clock
        self.new_bytes = 0  # committed entry bytes applied since the last snapshot
        self._last_ms = clock()

    def committed(self, size: int) -> None:
        self.new_bytes += size

    def snapshotted(self) -> None:
        self.new_bytes = 0
        self._last_ms = self._clock()

    def deadline_ms(self) -> float | None:
        """When the time rule makes a snapshot due (clock milliseconds); None while it cannot."""
        if self.max_interval_ms <= 0 or self.new_bytes <= 0:
            return None
        return self._last_ms + self.max_interval_ms

    def due(self) -> bool:
        if self.new_bytes >= self.max_bytes:
            return True
        deadline = self.deadline_ms()
        return deadline is not None and self._clock() >= deadline


class SnapshotGenerator:
    def __init__(self, driver: RaftDriver, image_copy: Callable[[], MetadataImage], policy: SnapshotPolicy) -> None:
        """`image_copy`: a copy of the committed image as of the last applied entry, which later commits leave
        unchanged."""
        self.driver = driver
        self.policy = policy
        self._image_copy = image_copy
        self._end = 0  # the offset the image reflects: every entry below it is applied
        self._writing: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self.written = 0  # snapshots this node wrote (this process)

    def loaded(self, end: int) -> None:
        """The image was replaced by a snapshot ending at `end` (at start, or one installed from the leader): it
        counts as the latest snapshot."""
        self._end = end
        self.policy.snapshotted()

    def applied(self, end: int, size: int) -> None:
        """Entries of `size` bytes were applied; the image now reflects every offset below `end`."""
        self._end = end
        self.policy.committed(size)
        self._check()

    def _check(self) -> None:
        if self._writing is not None or self.driver.failure is not None:
            return
        if self.policy.due():
            self._start()
        else:
            self._arm_timer()

    def _arm_timer(self) -> None:
        deadline = self.policy.deadline_ms()
        if deadline is None or self._timer is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # opening without a loop: the next commit arms it
            return
        self._timer = loop.call_later(max(0.0, (deadline - _monotonic_ms()) / 1000.0), self._timer_fired)

    def _timer_fired(self) -> None:
        self._timer = None
        self._check()

    def _start(self) -> None:
        end, image = self._end, self._image_copy()
        self.policy.snapshotted()
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # opening without a loop (a lone voter commits its log there): write it now
            self._write(end, encode_entry(snapshot_records(image)))
            return
        self._writing = loop.create_task(self._encode_and_write(end, image), name="metadata-snapshot")

    async def _encode_and_write(self, end: int, image: MetadataImage) -> None:
        try:
            parts: list[bytes] = []
            for record in snapshot_records(image):
                parts.append(encode_record(record))
                if len(parts) % CHUNK_RECORDS == 0:
                    await asyncio.sleep(0)
            self._write(end, join_encoded(parts))
        finally:
            self._writing = None
        self._check()  # entries committed while writing may already make the next one due

    def _write(self, end: int, data: bytes) -> None:
        started = time.perf_counter()
        try:
            snapshot = self.driver.create_snapshot(end, data)
        except RaftStoppedError:
            return
        except (OSError, ValueError):  # the log is no worse off: the next snapshot tries again
            log.exception("node %d could not write its metadata snapshot at offset %d", self.driver.node_id, end)
            return
        if snapshot is not None:
            self.written += 1
            log.info("node %d wrote metadata snapshot %s (%d bytes) in %.1f ms", self.driver.node_id,
                     snapshot.snapshot_id, len(data), (time.perf_counter() - started) * 1000)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._writing is not None:
            self._writing.cancel()
