"""Tracking blobs into tubes: one object's boxes over time (the unit video synopsis rearranges).

Greedy association on predicted position (constant velocity), because objects in surveillance
footage move smoothly and scenes are sparse; a track survives ``max_missed`` frames without a blob,
which bridges short occlusions (a lamp post, another object). Blobs that fall inside a matched track's
predicted box are merged into it, so an object cut in two by an occluder stays one tube.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from video.detect import Box


@dataclass
class Tube:
    """An object's observations. ``crops`` (BGRA, alpha = foreground mask) feed the renderer."""

    tube_id: int
    frames: list[int] = field(default_factory=list)
    boxes: list[Box] = field(default_factory=list)
    crops: dict[int, np.ndarray] = field(default_factory=dict)
    color_samples: list[np.ndarray] = field(default_factory=list)  # votes per colour name
    hog_hits: int = 0
    hog_tries: int = 0
    cls: str = ""
    color: str = ""

    @property
    def first(self) -> int:
        return self.frames[0]

    @property
    def last(self) -> int:
        return self.frames[-1]

    @property
    def span(self) -> int:
        return self.last - self.first + 1

    def add(self, frame: int, box: Box) -> None:
        self.frames.append(frame)
        self.boxes.append(box)

    def extend(self, other: Tube) -> None:
        """Append a later tube of the same object (stitching across segments)."""
        keep = [i for i, f in enumerate(other.frames) if f > self.last]
        self.frames += [other.frames[i] for i in keep]
        self.boxes += [other.boxes[i] for i in keep]
        self.crops.update({f: c for f, c in other.crops.items() if f not in self.crops})
        self.color_samples += other.color_samples
        self.hog_hits += other.hog_hits
        self.hog_tries += other.hog_tries

    def velocity(self) -> tuple[float, float]:
        """Centre displacement per frame over the last few observations."""
        if len(self.frames) < 2:
            return 0.0, 0.0
        k = max(0, len(self.frames) - 5)
        (x0, y0, w0, h0), (x1, y1, w1, h1) = self.boxes[k], self.boxes[-1]
        dt = self.frames[-1] - self.frames[k]
        return ((x1 + w1 / 2) - (x0 + w0 / 2)) / dt, ((y1 + h1 / 2) - (y0 + h0 / 2)) / dt

    def predict(self, frame: int) -> Box:
        vx, vy = self.velocity()
        x, y, w, h = self.boxes[-1]
        gap = frame - self.last
        return round(x + vx * gap), round(y + vy * gap), w, h


def iou(a: Box, b: Box) -> float:
    ax, ay, aw, ah = a
    bx, by, bw, bh = b
    ix = max(0, min(ax + aw, bx + bw) - max(ax, bx))
    iy = max(0, min(ay + ah, by + bh) - max(ay, by))
    inter = ix * iy
    union = aw * ah + bw * bh - inter
    return inter / union if union else 0.0


def union_box(a: Box, b: Box) -> Box:
    x0, y0 = min(a[0], b[0]), min(a[1], b[1])
    x1, y1 = max(a[0] + a[2], b[0] + b[2]), max(a[1] + a[3], b[1] + b[3])
    return x0, y0, x1 - x0, y1 - y0


def _grow(box: Box, frac: float) -> Box:
    x, y, w, h = box
    dx, dy = round(w * frac), round(h * frac)
    return x - dx, y - dy, w + 2 * dx, h + 2 * dy


def _distance(pred: Box, det: Box) -> float:
    """Centre distance in units of the predicted box's size (scale-free gate)."""
    px, py = pred[0] + pred[2] / 2, pred[1] + pred[3] / 2
    dx, dy = det[0] + det[2] / 2, det[1] + det[3] / 2
    return float(np.hypot(px - dx, py - dy)) / max(pred[2], pred[3], 1)


class Tracker:
    def __init__(self, max_missed: int = 12, min_observations: int = 5, gate: float = 1.2,
                 max_area: float = float("inf")) -> None:
        self.max_missed = max_missed
        self.max_area = max_area
        self.min_observations = min_observations
        self.gate = gate
        self.active: list[Tube] = []
        self.done: list[Tube] = []
        self._next_id = 0

    def update(self, frame: int, detections: list[Box]) -> list[tuple[Tube, Box]]:
        """Assign this frame's blobs; returns (tube, box) pairs observed at ``frame``."""
        predicted = [tube.predict(frame) for tube in self.active]
        matched: dict[int, Box] = {}
        used: set[int] = set()
        # First, established tracks take every blob lying within their predicted box: the pieces of
        # an object cut in two by an occluder are one observation.
        by_length = sorted(range(len(self.active)), key=lambda t: -len(self.active[t].frames))
        for t in by_length:
            if len(self.active[t].frames) < 3:
                continue
            area = _grow(predicted[t], 0.25)
            inside = [d for d, det in enumerate(detections) if d not in used and _inside(det, area)]
            if inside:
                box = detections[inside[0]]
                for d in inside[1:]:
                    box = union_box(box, detections[d])
                usual = float(np.median([w * h for _, _, w, h in self.active[t].boxes[-25:]]))
                if len(inside) > 1 and box[2] * box[3] > min(1.5 * usual, self.max_area):
                    # Not one object's pieces: keep the largest blob, the others may start tubes.
                    inside = [max(inside, key=lambda d: detections[d][2] * detections[d][3])]
                    box = detections[inside[0]]
                matched[t] = box
                used.update(inside)
        # Then nearest blob within the gate, for young tracks and objects that grew or turned.
        pairs = sorted(
            (_distance(pred, det), t, d)
            for t, pred in enumerate(predicted) if t not in matched
            for d, det in enumerate(detections) if d not in used
        )
        for dist, t, d in pairs:
            if dist > self.gate or t in matched or d in used:
                continue
            matched[t] = detections[d]
            used.add(d)
        observed = []
        for t, box in matched.items():
            self.active[t].add(frame, box)
            observed.append((self.active[t], box))
        for d, det in enumerate(detections):
            if d not in used:
                tube = Tube(self._next_id)
                self._next_id += 1
                tube.add(frame, det)
                self.active.append(tube)
                observed.append((tube, det))
        still = []
        for tube in self.active:
            if frame - tube.last > self.max_missed:
                self._retire(tube)
            else:
                still.append(tube)
        self.active = still
        return observed

    def cut(self) -> None:
        """The view changed: every open tube ends here (nothing continues into another view)."""
        for tube in self.active:
            self._retire(tube)
        self.active = []

    def _retire(self, tube: Tube) -> None:
        if len(tube.frames) >= self.min_observations:
            self.done.append(tube)

    def finish(self) -> list[Tube]:
        self.cut()
        return link(sorted(self.done, key=lambda tube: (tube.first, tube.tube_id)), self.max_missed)


def link(tubes: list[Tube], max_gap: int, gate: float = 1.0) -> list[Tube]:
    """Join a tube to an earlier one that ended just before (or a few frames after) it began where
    the earlier one was heading: what is left of an object that an occluder split in two."""
    kept: list[Tube] = []
    for tube in sorted(tubes, key=lambda t: t.first):
        best, best_distance = None, gate
        for earlier in kept:
            if earlier.first < tube.first and tube.first - max_gap <= earlier.last <= tube.first + 3:
                distance = _distance(earlier.predict(tube.first), tube.boxes[0])
                if distance < best_distance:
                    best, best_distance = earlier, distance
        if best is None:
            kept.append(tube)
        else:
            best.extend(tube)
    return kept


def _inside(det: Box, area: Box) -> bool:
    """Most of ``det`` lies within ``area``."""
    x, y, w, h = det
    ax, ay, aw, ah = area
    ix = max(0, min(x + w, ax + aw) - max(x, ax))
    iy = max(0, min(y + h, ay + ah) - max(y, ay))
    return ix * iy >= 0.5 * w * h
