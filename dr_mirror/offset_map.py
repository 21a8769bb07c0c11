"""Source -> target offsets of one partition, exact: runs of consecutive offsets, each begun by a sync.

The mirror writes a target partition alone, so target offsets advance one per mirrored record. While
the source has no gaps the two stay equal (or a constant apart); a gap (a transaction marker, an
aborted transaction, a compacted-away record, a log start past 0) starts a new run, recorded as an
OffsetSync (upstream = the run's first source offset, downstream = its first target offset) before
the run's first batch is produced. With every run recorded, translation is exact:

    target(g) = min(d + (g - u), start of the next run on the target)

for the last sync (u, d) with u <= g: a group positioned inside a gap resumes at the next mirrored
record, never before it (no re-processing) and never after it (no loss).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field


@dataclass
class OffsetMap:
    """Syncs of one partition in upstream order, plus how far the mirror got on both sides."""

    upstream: list[int] = field(default_factory=lambda: [0])
    downstream: list[int] = field(default_factory=lambda: [0])
    source_position: int = 0  # next source offset to read
    target_position: int = 0  # next target offset (the target's log end as the mirror knows it)

    def add(self, upstream: int, downstream: int) -> None:
        """Record a sync read back or just written. A later sync at the same or a lower downstream offset
        replaces the runs it overlaps (a restart re-mirrors from there)."""
        while self.downstream and self.downstream[-1] >= downstream:
            self.upstream.pop()
            self.downstream.pop()
        self.upstream.append(upstream)
        self.downstream.append(downstream)

    def needs_sync(self, source_offset: int) -> bool:
        """Whether a batch starting at `source_offset`, written at `target_position`, begins a new run."""
        return source_offset - self.target_position != self.upstream[-1] - self.downstream[-1]

    def resume(self, target_end: int) -> int:
        """The source offset to continue from when the target log ends at `target_end` (after a restart)."""
        index = bisect.bisect_right(self.downstream, target_end) - 1
        if index < 0:
            return target_end
        del self.upstream[index + 1 :]
        del self.downstream[index + 1 :]
        self.target_position = target_end
        self.source_position = self.upstream[index] + (target_end - self.downstream[index])
        return self.source_position

    def translate(self, group_offset: int) -> int | None:
        """The target offset for a committed source offset; None when the mirror has not got that far."""
        if group_offset > self.source_position:
            return None
        index = bisect.bisect_right(self.upstream, group_offset) - 1
        if index < 0:
            return self.downstream[0]
        limit = self.downstream[index + 1] if index + 1 < len(self.downstream) else self.target_position
        return min(self.downstream[index] + (group_offset - self.upstream[index]), limit)
