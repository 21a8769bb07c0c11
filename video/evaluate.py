"""Scoring tubes against a synthetic scene's ground truth (tests and the benchmark share it).

A ground-truth object is found when one tube covers at least half of its visible frames with boxes
overlapping the true ones (IoU >= 0.3 on the shared frames); a tube is a true positive when it
matches some object. Recall, precision, time-span errors and class accuracy follow.
:func:`contact_sheet` tiles frames into one PNG, for a person to look at what the engine rendered.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np

from video.scene import Scene, SceneObject
from video.track import Tube, iou


@dataclass
class Score:
    matches: dict[int, Tube] = field(default_factory=dict)  # object id -> best tube
    objects: int = 0
    tubes: int = 0
    true_tubes: int = 0

    @property
    def recall(self) -> float:
        return len(self.matches) / self.objects if self.objects else 1.0

    @property
    def precision(self) -> float:
        return self.true_tubes / self.tubes if self.tubes else 1.0


def _visible(obj: SceneObject, frames: int) -> dict[int, tuple[int, int, int, int]]:
    return {f: box for f in range(obj.first_frame, min(obj.last_frame + 1, frames))
            if (box := obj.box(f)) is not None and box[2] >= 4}


def _coverage(obj_boxes: dict[int, tuple[int, int, int, int]], tube: Tube) -> float:
    hits = sum(1 for f, box in zip(tube.frames, tube.boxes, strict=True)
               if f in obj_boxes and iou(obj_boxes[f], box) >= 0.3)
    return hits / max(1, len(obj_boxes))


def score(tubes: list[Tube], scene: Scene, min_coverage: float = 0.5) -> Score:
    result = Score(objects=0, tubes=len(tubes))
    matched_tubes: set[int] = set()
    for obj in scene.visible_objects():
        boxes = _visible(obj, scene.frames)
        if not boxes:
            continue
        result.objects += 1
        near = [t for t in tubes if t.first <= obj.last_frame and t.last >= obj.first_frame]
        coverage = {id(t): _coverage(boxes, t) for t in near}
        for tube in tubes:
            if coverage.get(id(tube), 0) > 0.1:
                matched_tubes.add(id(tube))
        best = max(tubes, key=lambda t: coverage.get(id(t), 0), default=None)
        if best is not None and coverage.get(id(best), 0) >= min_coverage:
            result.matches[obj.object_id] = best
    result.true_tubes = len(matched_tubes)
    return result


def contact_sheet(frames: list[np.ndarray], out: Path, tiles: int = 12, columns: int = 4, width: int = 320) -> Path:
    """``tiles`` frames spread evenly over ``frames``, each labelled with its index, in a grid."""
    if not frames:
        raise ValueError("no frames for a contact sheet")
    picked = sorted({int(i) for i in np.linspace(0, len(frames) - 1, min(tiles, len(frames)))})
    height = round(frames[0].shape[0] * width / frames[0].shape[1])
    cells = []
    for index in picked:
        cell = cv2.resize(frames[index], (width, height), interpolation=cv2.INTER_AREA)
        cv2.putText(cell, str(index), (6, 18), cv2.FONT_HERSHEY_SIMPLEX, 0.55, (0, 255, 255), 1, cv2.LINE_AA)
        cells.append(cell)
    cells += [np.zeros_like(cells[0])] * (-len(cells) % columns)
    grid = np.vstack([np.hstack(cells[i:i + columns]) for i in range(0, len(cells), columns)])
    out.parent.mkdir(parents=True, exist_ok=True)
    if not cv2.imwrite(str(out), grid):
        raise OSError(f"cannot write {out}")
    return out
