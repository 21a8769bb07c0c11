"""Tube rearrangement in time: the synopsis schedule (after Pritch, Rav-Acha and Peleg, TPAMI 2008).

Each tube keeps its pixels and its own motion but gets a new start time in the condensed video. The
energy follows the paper: a collision cost (objects drawn over each other) and a length cost (every
frame the synopsis grows), with activity loss fixed at zero (every tube is shown) and chronological
consistency kept by placing tubes in order of their original start. Tubes are placed greedily, each
at the start that minimises ``collision_weight * overlap + length_weight * growth + earliness``,
evaluated for all starts at once on a coarse occupancy grid (a cross-correlation of the tube's
occupancy with the synopsis's), which is what makes an 8-hour schedule take seconds.

A synopsis is never longer than its original: starts are limited so every tube ends within the
original's length (default: the frame after the last object leaves, which showing every tube at its
own time always fits). When crowding would have needed a longer synopsis, the schedule takes the
cheapest start within the limit (more collisions) and says so (``capped``): footage too busy to
condense is reported, not stretched.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from video.track import Tube

GRID = (18, 32)  # occupancy cells (rows, cols) over the frame


@dataclass(frozen=True)
class Placement:
    tube_id: int
    shift: int  # synopsis frame = original frame - shift
    start: int  # first synopsis frame


@dataclass(frozen=True)
class View:
    """Synopsis frames ``[start, end)`` show the objects of original frames ``first..last`` (one view)."""

    start: int
    end: int
    first: int
    last: int


@dataclass(frozen=True)
class Schedule:
    placements: dict[int, Placement]
    length: int  # synopsis frames
    capped: bool = False  # some tube would have gone past the length limit: placed within it, overlapping
    views: tuple[View, ...] = ()

    def view_at(self, index: int) -> int:
        """Which of ``views`` synopsis frame ``index`` belongs to (0 when there is one or none)."""
        return max(0, bisect.bisect_right([v.start for v in self.views], index) - 1)

    def synopsis_frame(self, tube: Tube, frame: int) -> int:
        return frame - self.placements[tube.tube_id].shift


def _occupancy(tube: Tube, width: int, height: int, step: int) -> np.ndarray:
    """(time samples, cells) 0/1 occupancy of the tube, one sample every ``step`` frames."""
    rows, cols = GRID
    samples = (tube.span + step - 1) // step
    occ = np.zeros((samples, rows * cols), dtype=np.float32)
    cell = np.zeros((rows, cols), dtype=np.float32)
    for frame, (x, y, w, h) in zip(tube.frames, tube.boxes, strict=True):
        k = (frame - tube.first) // step
        cell[:] = 0
        c0, c1 = x * cols // width, min(cols, ((x + w) * cols + width - 1) // width)
        r0, r1 = y * rows // height, min(rows, ((y + h) * rows + height - 1) // height)
        cell[max(r0, 0):r1, max(c0, 0):c1] = 1
        occ[k] = np.maximum(occ[k], cell.ravel())
    return occ


def schedule(tubes: list[Tube], width: int, height: int, collision_weight: float = 50.0,
             length_weight: float = 1.0, step: int | None = None, max_length: int | None = None,
             cuts: Sequence[int] = ()) -> Schedule:
    """Place every tube; returns shifts and the synopsis length in frames, at most ``max_length``
    (the original's frame count; default the end of the last tube).

    ``cuts`` (frames where the camera changed view, video.motion) split the video into views; each
    view's tubes are condensed among themselves and the views follow each other in the synopsis, so
    every synopsis frame shows one view's objects on that view's background (``views``)."""
    if not tubes:
        return Schedule({}, 0)
    limit = max(t.last for t in tubes) + 1 if max_length is None else max_length
    if any(t.span > limit for t in tubes):
        raise ValueError(f"a tube is longer than the {limit}-frame limit")
    bounds = [0, *sorted(c for c in set(cuts) if 0 < c < limit), limit]
    groups: dict[int, list[Tube]] = {}
    for tube in tubes:
        groups.setdefault(bisect.bisect_right(bounds, tube.first) - 1, []).append(tube)
    if any(t.last >= bounds[v + 1] for v, group in groups.items() for t in group):
        groups = {0: tubes}  # a tube reaches past a cut: views cannot be kept apart, condense as one
        bounds = [0, limit]
    placements: dict[int, Placement] = {}
    views = []
    offset, capped = 0, False
    for view, group in sorted(groups.items()):
        placed, length, view_capped = _place(group, width, height, collision_weight, length_weight, step,
                                             bounds[view + 1] - bounds[view])
        placements.update({tid: Placement(tid, p.shift - offset, p.start + offset) for tid, p in placed.items()})
        views.append(View(offset, offset + length, bounds[view], bounds[view + 1] - 1))
        offset += length
        capped |= view_capped
    return Schedule(placements, offset, capped, tuple(views))


def _place(tubes: list[Tube], width: int, height: int, collision_weight: float, length_weight: float,
           step: int | None, limit: int) -> tuple[dict[int, Placement], int, bool]:
    """The greedy placement of one view's tubes within ``limit`` frames: placements, length, capped."""
    longest = max(t.span for t in tubes)
    step = step or max(1, longest // 100)  # about 100 time samples for the longest tube
    limit = max(limit, longest)
    ordered = sorted(tubes, key=lambda t: (t.first, t.tube_id))
    capacity = sum((t.span + step - 1) // step for t in ordered) + 1
    occupied = np.zeros((capacity, GRID[0] * GRID[1]), dtype=np.float32)
    length = 0  # in samples
    placements: dict[int, Placement] = {}
    capped = False
    for tube in ordered:
        occ = _occupancy(tube, width, height, step)
        n = len(occ)
        horizon = length + 1  # candidate starts 0..length (starting at the end never collides)
        overlap = occupied[:horizon + n] @ occ.T  # (frames, samples): overlap of frame i with sample j
        idx = np.arange(horizon)[:, None] + np.arange(n)[None, :]
        collision = overlap[idx, np.arange(n)[None, :]].sum(axis=1)
        growth = np.maximum(0, np.arange(horizon) + n - length)
        cost = collision_weight * collision + length_weight * growth + 1e-3 * np.arange(horizon)
        latest = (limit - tube.span) // step  # the last start (in samples) that ends within the limit
        start = int(np.argmin(cost[:latest + 1]))
        capped |= int(np.argmin(cost)) > latest
        occupied[start:start + n] += occ
        length = max(length, start + n)
        placements[tube.tube_id] = Placement(tube.tube_id, tube.first - start * step, start * step)
    return placements, max(p.start + t.span for t, p in ((t, placements[t.tube_id]) for t in tubes)), capped


def collision_rate(tubes: list[Tube], plan: Schedule) -> float:
    """Share of object pixels (box area) in the synopsis that another object's box also covers."""
    frames: dict[int, list[tuple[int, int, int, int]]] = {}
    for tube in tubes:
        for frame, box in zip(tube.frames, tube.boxes, strict=True):
            frames.setdefault(plan.synopsis_frame(tube, frame), []).append(box)
    total = overlapped = 0
    for boxes in frames.values():
        for i, (x, y, w, h) in enumerate(boxes):
            total += w * h
            if len(boxes) < 2:
                continue
            covered = np.zeros((h, w), dtype=bool)
            for j, (ox, oy, ow, oh) in enumerate(boxes):
                if j != i:
                    x0, y0 = max(x, ox) - x, max(y, oy) - y
                    x1, y1 = min(x + w, ox + ow) - x, min(y + h, oy + oh) - y
                    if x1 > x0 and y1 > y0:
                        covered[y0:y1, x0:x1] = True
            overlapped += int(covered.sum())
    return overlapped / total if total else 0.0
