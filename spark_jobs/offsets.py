"""Offset bookkeeping of the bus source, without I/O: what a micro-batch reads, and when data is lost.

A source offset is Spark's Kafka-source JSON, ``{"topic": {"0": 42, "1": 17}}`` (next offset to read
per partition). Spark compares offsets as JSON text, so every dict built here has a stable order:
topics sorted by name, partitions by number. ``-2`` means earliest and ``-1`` latest, as in
Spark's ``startingOffsets``.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

EARLIEST = -2
LATEST = -1

TopicPartition = tuple[str, int]
Offsets = dict[TopicPartition, int]
Watermarks = dict[TopicPartition, tuple[int, int]]
"""Per partition, (log start offset, high watermark) as the broker reports them now."""

DATA_LOSS_HINT = (
    "Some data may have been lost because they are not available in the bus any more; either the data "
    "was aged out by retention or the topic may have been deleted before all the data in the topic was "
    'processed. If you want your streaming query to go on in such cases, set the source option "failOnDataLoss" '
    'to "false".'
)


class DataLossError(RuntimeError):
    """Offsets the query still needed are gone (retention, deleted records, a deleted topic)."""


def to_json(offsets: Offsets) -> dict[str, dict[str, int]]:
    """The JSON form, in the stable order Spark's textual comparison needs."""
    out: dict[str, dict[str, int]] = {}
    for topic, partition in sorted(offsets):
        out.setdefault(topic, {})[str(partition)] = offsets[(topic, partition)]
    return out


def from_json(data: Mapping[str, Mapping[str, int]]) -> Offsets:
    try:
        return {(topic, int(p)): int(o) for topic, parts in data.items() for p, o in parts.items()}
    except (AttributeError, TypeError, ValueError) as exc:
        raise ValueError(f"not a Kafka source offset: {data!r}") from exc


def parse_starting(text: str) -> str | Offsets:
    """``startingOffsets``: ``earliest``, ``latest`` or per-partition JSON (-2 earliest, -1 latest)."""
    lowered = text.strip().lower()
    if lowered in ("earliest", "latest"):
        return lowered
    try:
        return from_json(json.loads(text))
    except (json.JSONDecodeError, ValueError) as exc:
        raise ValueError(f'startingOffsets must be "earliest", "latest" or JSON, not {text!r}') from exc


def resolve_starting(spec: str | Offsets, marks: Watermarks) -> Offsets:
    """The first batch's start: the spec resolved against the partitions that exist now.

    Partitions the JSON does not name start at their earliest offset, like partitions that
    appear later. Partitions the JSON names that do not exist are an error (a typo loses data).
    """
    if isinstance(spec, str):
        return {tp: (low if spec == "earliest" else high) for tp, (low, high) in marks.items()}
    unknown = sorted(set(spec) - set(marks))
    if unknown:
        raise ValueError(f"startingOffsets names partitions that do not exist: {unknown}")
    out = {}
    for tp, (low, high) in marks.items():
        offset = spec.get(tp, EARLIEST)
        out[tp] = low if offset == EARLIEST else high if offset == LATEST else offset
    return out


def check_progress(start: Offsets, marks: Watermarks, fail_on_data_loss: bool) -> Offsets:
    """Compare where the query is with what the broker has; returns the start to plan from.

    A partition that vanished, or whose high watermark fell below the query's position (topic
    deleted and re-created), is data loss: an error, or (``failOnDataLoss=false``) skipped past.
    """
    lost = []
    checked = {}
    for tp, offset in start.items():
        if tp not in marks:
            lost.append(f"{tp[0]}-{tp[1]} is gone")
            continue
        low, high = marks[tp]
        if offset > high:
            lost.append(f"{tp[0]}-{tp[1]} went back from {offset} to {high}")
            checked[tp] = low
        else:
            checked[tp] = offset
    if lost and fail_on_data_loss:
        raise DataLossError(f"{'; '.join(lost)}. {DATA_LOSS_HINT}")
    return checked


def latest(start: Offsets, marks: Watermarks, max_rows: int | None, target: Offsets | None = None) -> Offsets:
    """The end of the next batch: everything available, capped by ``target`` (availableNow) and
    spread over partitions by their backlog when ``max_rows`` limits it (Spark's rate limit).

    Partitions new since ``start`` begin at their earliest offset.
    """
    begin = {tp: start.get(tp, low) for tp, (low, _) in marks.items()}
    until = {tp: high for tp, (_, high) in marks.items()}
    if target is not None:
        until = {tp: min(high, target[tp]) if tp in target else begin[tp] for tp, high in until.items()}
    until = {tp: max(end, begin[tp]) for tp, end in until.items()}
    if max_rows is None:
        return until
    sizes = {tp: until[tp] - begin[tp] for tp in until if until[tp] > begin[tp]}
    total = sum(sizes.values())
    if total <= max_rows:
        return until
    limited = dict(until)
    for tp, size in sizes.items():
        share = max_rows * size / total
        step = math.ceil(share) if share < 1 else math.floor(share)  # never starve a small partition
        limited[tp] = min(until[tp], begin[tp] + step)
    return limited


@dataclass(frozen=True)
class Range:
    """Offsets ``[start, until)`` of one partition for one Spark task; ``start`` may be EARLIEST."""

    topic: str
    partition: int
    start: int
    until: int

    @property
    def size(self) -> int:
        return self.until - self.start


def plan(start: Offsets, end: Offsets, min_partitions: int | None = None) -> list[Range]:
    """One range per partition with data (new partitions from EARLIEST, resolved in the executor),
    split further when ``minPartitions`` asks for more tasks than there are partitions."""
    ranges = []
    for tp in sorted(end):
        begin = start.get(tp, EARLIEST)
        if begin == EARLIEST or end[tp] > begin:
            ranges.append(Range(tp[0], tp[1], begin, end[tp]))
    if not min_partitions or min_partitions <= len(ranges):
        return ranges
    known = [r for r in ranges if r.start != EARLIEST]
    total = sum(r.size for r in known)
    if total == 0:
        return ranges
    out = []
    for r in ranges:
        if r.start == EARLIEST:
            out.append(r)
            continue
        parts = max(round(r.size / total * min_partitions), 1)
        out.extend(_split(r, parts))
    return out


def _split(r: Range, parts: int) -> Iterable[Range]:
    parts = min(parts, r.size)
    bounds = [r.start + r.size * i // parts for i in range(parts + 1)]
    return [Range(r.topic, r.partition, a, b) for a, b in itertools.pairwise(bounds) if b > a]
