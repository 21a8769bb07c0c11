"""Per-partition producer state: idempotent sequence checks and open transactions (Kafka's ProducerStateManager).

For each producer id the partition remembers the epoch, the last five appended batches (their
sequence ranges and offsets, so a retried batch is answered with its original offset instead of
being written twice), and the first offset of its open transaction (which bounds the last stable
offset that `read_committed` consumers may see). Open transactions are also kept in offset order, so the
first unstable offset is found without a scan over every producer. Aborted transactions are not kept
here: the partition writes each to its log's transaction index (Kafka's `.txnindex`), which retention
prunes with the segments. The state is rebuilt from batch headers and snapshotted as JSON next to the
log, so deduplication survives restarts and crashes.

Lifecycle, as Kafka's: a producer with no open transaction whose last append is older than
`producer.id.expiration.ms` is removed (`remove_expired`), and such state is not restored from a snapshot.
"""

from __future__ import annotations

import json
import os
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from pathlib import Path

from kio.schema.errors import ErrorCode

from bus.log.txn_index import AbortedTxn
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


def _last_seq(batch: BatchInfo) -> int:
    seq = batch.base_sequence + batch.last_offset_delta
    return seq - INT32_MAX - 1 if seq > INT32_MAX else seq


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


class ProducerStateManager:
    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}
        # first offset -> producer id of each open transaction. A transaction begins at the log end, so
        # insertion order is offset order and the first key is the first unstable offset (O(1)).
        self.ongoing: OrderedDict[int, int] = OrderedDict()
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
            self.ongoing[batch.base_offset] = batch.producer_id

    def complete_txn(self, producer_id: int, epoch: int, marker_offset: int, aborted: bool,
                     coordinator_epoch: int = -1, timestamp: int = -1) -> AbortedTxn | None:
        """A commit/abort marker was appended at `marker_offset`: the producer's transaction is closed.
        Returns the transaction when the marker aborted one, for the caller's transaction index.

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
        if first is None:
            return None
        self.ongoing.pop(first, None)
        if not aborted:
            return None
        # Kafka's lastStableOffset of the index entry: the first offset still undecided, else the log end.
        stable = self.first_unstable_offset()
        return AbortedTxn(producer_id, first, marker_offset, marker_offset + 1 if stable is None else stable)

    def first_unstable_offset(self) -> int | None:
        return next(iter(self.ongoing), None)

    def open_transaction(self, producer_id: int) -> int | None:
        entry = self.producers.get(producer_id)
        return entry.txn_first_offset if entry else None

    # -- lifecycle ---------------------------------------------------------------------------------

    def remove_expired(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers idle for `expiration_ms` without an open transaction (Kafka's
        removeExpiredProducers); a later batch of theirs is then accepted as from a new producer."""
        expired = [pid for pid, e in self.producers.items() if _is_expired(e, now_ms, expiration_ms)]
        for pid in expired:
            del self.producers[pid]
        return len(expired)

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
        }

    @classmethod
    def from_json(cls, data: dict[str, object], now_ms: int | None = None,
                  expiration_ms: int | None = None) -> ProducerStateManager:
        """The state a snapshot holds, less producers already expired at `now_ms` (Kafka's loadFromSnapshot)."""
        state = cls()
        state.applied_up_to = int(data["applied_up_to"])  # type: ignore[call-overload]
        for item in data["producers"]:  # type: ignore[attr-defined]
            entry = ProducerEntry(item["id"], item["epoch"], txn_first_offset=item["txn_first_offset"],
                                  coordinator_epoch=item["coordinator_epoch"], last_timestamp=item["last_timestamp"])
            if now_ms is not None and expiration_ms is not None and _is_expired(entry, now_ms, expiration_ms):
                continue
            entry.batches.extend(BatchMetadata(*b) for b in item["batches"])
            state.producers[entry.producer_id] = entry
        for entry in sorted(state.producers.values(), key=lambda e: e.txn_first_offset or 0):
            if entry.txn_first_offset is not None:
                state.ongoing[entry.txn_first_offset] = entry.producer_id
        return state


def _is_expired(entry: ProducerEntry, now_ms: int, expiration_ms: int) -> bool:
    """Kafka's isProducerExpired: idle past the expiration (by its last batch's timestamp), no open transaction."""
    return entry.txn_first_offset is None and now_ms - entry.last_timestamp >= expiration_ms


SNAPSHOT_SUFFIX = ".snapshot"


def write_snapshot(directory: Path, state: ProducerStateManager) -> Path:
    """Atomically write `<offset>.snapshot` (offset = state.applied_up_to) and drop older snapshots."""
    return write_snapshot_file(directory, state.applied_up_to, snapshot_payload(state))


def snapshot_payload(state: ProducerStateManager) -> bytes:
    """The snapshot's bytes: taken on the event loop, where the state changes, and written elsewhere."""
    return json.dumps(state.to_json(), separators=(",", ":")).encode()


def write_snapshot_file(directory: Path, offset: int, data: bytes) -> Path:
    """Write and fsync a snapshot taken at `offset`, then drop the older ones. Blocking: run off the loop."""
    path = directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"
    tmp = path.with_suffix(".snapshot.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    for old in directory.glob(f"*{SNAPSHOT_SUFFIX}"):
        if old != path:
            old.unlink(missing_ok=True)
    return path


def delete_snapshots_after(directory: Path, offset: int) -> None:
    """Delete the snapshots taken past `offset` (Kafka's truncateAndReload): the log was truncated there, and a
    snapshot describing batches that are gone would be loaded once the log grows past it again."""
    for path in directory.glob(f"*{SNAPSHOT_SUFFIX}"):
        taken_at = _snapshot_offset(path)
        if taken_at is not None and taken_at > offset:
            path.unlink(missing_ok=True)


def _snapshot_offset(path: Path) -> int | None:
    try:
        return int(path.name[: -len(SNAPSHOT_SUFFIX)])
    except ValueError:
        return None


def load_snapshot(directory: Path, log_end_offset: int, now_ms: int | None = None,
                  expiration_ms: int | None = None) -> ProducerStateManager | None:
    """The newest readable snapshot at or below the log end (a snapshot past a truncated tail is useless),
    without the producers expired by `now_ms`. A snapshot from before transaction indexes (it lists the
    aborted transactions itself) is not used: replaying the log from its start rebuilds those indexes."""
    candidates = sorted(directory.glob(f"*{SNAPSHOT_SUFFIX}"), reverse=True)
    for path in candidates:
        offset = _snapshot_offset(path)
        if offset is None or offset > log_end_offset:
            continue
        try:
            data = json.loads(path.read_bytes())
            if "aborted" in data:
                return None
            return ProducerStateManager.from_json(data, now_ms, expiration_ms)
        except (ValueError, KeyError, TypeError):
            continue
    return None
