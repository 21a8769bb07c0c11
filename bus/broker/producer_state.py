"""Per-partition producer state: idempotent sequence checks and open transactions (Kafka's ProducerStateManager).

For each producer id the partition remembers the epoch, the last five appended batches (their
sequence ranges and offsets, so a retried batch is answered with its original offset instead of
being written twice), and the first offset of its open transaction (which bounds the last stable
offset that `read_committed` consumers may see). Aborted transactions are remembered so fetches can
tell consumers which records to skip. The state is rebuilt from batch headers and snapshotted as
JSON next to the log, so deduplication survives restarts and crashes.
"""

from __future__ import annotations

import bisect
import json
import os
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from kio.schema.errors import ErrorCode

from bus.protocol.errors import KafkaApiError
from bus.protocol.records import BatchInfo

NO_PRODUCER_ID = -1
NO_EPOCH = -1
NO_SEQUENCE = -1
INT32_MAX = 2**31 - 1
CACHED_BATCHES = 5  # Kafka keeps five: max.in.flight.requests.per.connection <= 5 with idempotence


class ProducerStateError(KafkaApiError):
    """A produced batch whose producer id, epoch or sequence the partition must refuse."""


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass(slots=True)
class ProducerEntry:
    producer_id: int
    epoch: int = NO_EPOCH
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=CACHED_BATCHES))
    txn_first_offset: int | None = None
    coordinator_epoch: int = -1
    last_timestamp: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    def find_duplicate(self, batch: BatchInfo) -> BatchMetadata | None:
        if batch.producer_epoch != self.epoch:
            return None
        last_seq = _last_seq(batch)
        for cached in self.batches:
            if cached.first_seq == batch.base_sequence and cached.last_seq == last_seq:
                return cached
        return None


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int


def _last_seq(batch: BatchInfo) -> int:
    seq = batch.base_sequence + batch.last_offset_delta
    return seq - INT32_MAX - 1 if seq > INT32_MAX else seq


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


class ProducerStateManager:
    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}
        self.aborted: list[AbortedTxn] = []  # ordered by first_offset
        self.max_aborted_span = 0  # longest last - first among them: bounds the search in aborted_between
        self.applied_up_to = 0  # next offset whose batch has been folded into the state

    # -- validation before append ----------------------------------------------------------------

    def check(self, batch: BatchInfo) -> BatchMetadata | None:
        """Validate one produced batch; returns the original metadata when it is a retried duplicate."""
        if batch.producer_id == NO_PRODUCER_ID:
            if batch.is_transactional:
                raise ProducerStateError(ErrorCode.invalid_record, "transactional batch without a producer id")
            return None
        entry = self.producers.get(batch.producer_id)
        if entry is None:
            return None  # unknown producer (new, or its state expired): any sequence is accepted, as Kafka does
        if batch.producer_epoch < entry.epoch:
            raise ProducerStateError(
                ErrorCode.invalid_producer_epoch,
                f"Epoch of producer {batch.producer_id} is {batch.producer_epoch}, "
                f"which is smaller than the last seen epoch {entry.epoch}",
            )
        duplicate = entry.find_duplicate(batch)
        if duplicate is not None:
            return duplicate
        if batch.producer_epoch != entry.epoch:
            if batch.base_sequence != 0 and entry.epoch != NO_EPOCH:
                raise ProducerStateError(
                    ErrorCode.out_of_order_sequence_number,
                    f"Invalid sequence number for new epoch of producer {batch.producer_id} at offset "
                    f"{batch.base_offset}: {batch.producer_epoch} (request epoch), {batch.base_sequence} (seq. "
                    "number), expected 0",
                )
        elif not _in_sequence(entry.last_seq, batch.base_sequence):
            # An entry without batches (made by a marker, or an epoch a marker bumped) expects seq 0, as Kafka.
            raise ProducerStateError(
                ErrorCode.out_of_order_sequence_number,
                f"Out of order sequence number for producer {batch.producer_id}: {batch.base_sequence} "
                f"(incoming seq. number), {entry.last_seq} (current end sequence number)",
            )
        if entry.txn_first_offset is not None and not batch.is_transactional:
            raise ProducerStateError(
                ErrorCode.invalid_txn_state,
                f"Expected transactional write from producer {batch.producer_id}: its transaction is open "
                f"since offset {entry.txn_first_offset}",
            )
        return None

    # -- state updates after append ----------------------------------------------------------------

    def update(self, batch: BatchInfo) -> None:
        """Fold an appended batch (offsets assigned) into the state."""
        self.applied_up_to = max(self.applied_up_to, batch.next_offset)
        if batch.producer_id == NO_PRODUCER_ID or batch.is_control:
            return
        entry = self.producers.get(batch.producer_id)
        if entry is None:
            entry = self.producers[batch.producer_id] = ProducerEntry(batch.producer_id)
        if batch.producer_epoch != entry.epoch:
            entry.epoch = batch.producer_epoch
            entry.batches.clear()
        entry.batches.append(
            BatchMetadata(batch.base_sequence, _last_seq(batch), batch.base_offset, batch.last_offset,
                          batch.max_timestamp)
        )
        entry.last_timestamp = batch.max_timestamp
        if batch.is_transactional and entry.txn_first_offset is None:
            entry.txn_first_offset = batch.base_offset

    def complete_txn(self, producer_id: int, epoch: int, marker_offset: int, aborted: bool,
                     coordinator_epoch: int = -1, timestamp: int = -1) -> None:
        """A commit/abort marker was appended at `marker_offset`: the producer's transaction is closed.

        A marker written with a bumped epoch (the coordinator fencing a timed-out or replaced
        producer) starts that epoch here too, forgetting the old epoch's batches as Kafka's
        `maybeUpdateProducerEpoch` does: DescribeProducers then reports no last sequence.
        """
        self.applied_up_to = max(self.applied_up_to, marker_offset + 1)
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = self.producers[producer_id] = ProducerEntry(producer_id, epoch=epoch)
        if epoch > entry.epoch:
            entry.epoch = epoch
            entry.batches.clear()
        entry.coordinator_epoch = coordinator_epoch
        if timestamp >= 0:
            entry.last_timestamp = timestamp
        first = entry.txn_first_offset
        entry.txn_first_offset = None
        if aborted and first is not None:
            bisect.insort(self.aborted, AbortedTxn(producer_id, first, marker_offset),
                          key=lambda txn: txn.first_offset)
            self.max_aborted_span = max(self.max_aborted_span, marker_offset - first)

    def first_unstable_offset(self) -> int | None:
        offsets = [e.txn_first_offset for e in self.producers.values() if e.txn_first_offset is not None]
        return min(offsets) if offsets else None

    def open_transaction(self, producer_id: int) -> int | None:
        entry = self.producers.get(producer_id)
        return entry.txn_first_offset if entry else None

    def aborted_between(self, start: int, end: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [start, end): what a read_committed fetch must filter.

        Bisected rather than scanned, since every read_committed fetch asks and a partition can
        remember many aborts: one starting before `start - max_aborted_span` has ended before `start`.
        """
        txns = self.aborted
        lo = bisect.bisect_left(txns, start - self.max_aborted_span, key=lambda t: t.first_offset)
        hi = bisect.bisect_left(txns, end, lo=lo, key=lambda t: t.first_offset)
        return [t for t in txns[lo:hi] if t.last_offset >= start]

    def truncate_before(self, log_start_offset: int) -> None:
        """Forget aborted transactions wholly below the log start (deleted by retention)."""
        self.aborted = [t for t in self.aborted if t.last_offset >= log_start_offset]

    # -- persistence -----------------------------------------------------------------------------

    def to_json(self) -> dict[str, object]:
        return {
            "applied_up_to": self.applied_up_to,
            "producers": [
                {
                    "id": e.producer_id,
                    "epoch": e.epoch,
                    "txn_first_offset": e.txn_first_offset,
                    "coordinator_epoch": e.coordinator_epoch,
                    "last_timestamp": e.last_timestamp,
                    "batches": [[b.first_seq, b.last_seq, b.first_offset, b.last_offset, b.timestamp]
                                for b in e.batches],
                }
                for e in self.producers.values()
            ],
            "aborted": [[t.producer_id, t.first_offset, t.last_offset] for t in self.aborted],
        }

    @classmethod
    def from_json(cls, data: dict[str, object]) -> ProducerStateManager:
        state = cls()
        state.applied_up_to = int(data["applied_up_to"])  # type: ignore[arg-type]
        for item in data["producers"]:  # type: ignore[attr-defined]
            entry = ProducerEntry(item["id"], item["epoch"], txn_first_offset=item["txn_first_offset"],
                                  coordinator_epoch=item["coordinator_epoch"], last_timestamp=item["last_timestamp"])
            entry.batches.extend(BatchMetadata(*b) for b in item["batches"])
            state.producers[entry.producer_id] = entry
        state.aborted = sorted((AbortedTxn(*t) for t in data["aborted"]),  # type: ignore[attr-defined]
                               key=lambda t: t.first_offset)
        state.max_aborted_span = max((t.last_offset - t.first_offset for t in state.aborted), default=0)
        return state


SNAPSHOT_SUFFIX = ".snapshot"


def write_snapshot(directory: Path, state: ProducerStateManager) -> Path:
    """Atomically write `<offset>.snapshot` (offset = state.applied_up_to) and drop older snapshots."""
    path = directory / f"{state.applied_up_to:020d}{SNAPSHOT_SUFFIX}"
    tmp = path.with_suffix(".snapshot.tmp")
    data = json.dumps(state.to_json(), separators=(",", ":")).encode()
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    for old in directory.glob(f"*{SNAPSHOT_SUFFIX}"):
        if old != path:
            old.unlink(missing_ok=True)
    return path


def load_snapshot(directory: Path, log_end_offset: int) -> ProducerStateManager | None:
    """The newest readable snapshot at or below the log end (a snapshot past a truncated tail is useless)."""
    candidates = sorted(directory.glob(f"*{SNAPSHOT_SUFFIX}"), reverse=True)
    for path in candidates:
        try:
            offset = int(path.name[: -len(SNAPSHOT_SUFFIX)])
        except ValueError:
            continue
        if offset > log_end_offset:
            continue
        try:
            return ProducerStateManager.from_json(json.loads(path.read_bytes()))
        except (ValueError, KeyError, TypeError):
            continue
    return None
