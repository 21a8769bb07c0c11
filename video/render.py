"""Rendering the synopsis: tubes pasted on the background at their scheduled times, labelled with the
original time, written as WebM (VP8: OpenCV's wheel has no H.264 encoder and browsers play VP8),
plus a JPEG thumbnail per object and a JSON index object -> original time span.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from video.synopsis import Schedule
from video.track import Tube

FOURCC = "VP80"


@dataclass(frozen=True)
class Timebase:
    """Maps frame numbers to wall-clock times of the original recording."""

    start: dt.datetime
    fps: float

    def at(self, frame: int) -> dt.datetime:
        return self.start + dt.timedelta(seconds=frame / self.fps)


def background_from(path: Path, samples: int = 25, span: tuple[int, int] | None = None) -> np.ndarray:
    """Median of frames spread over the video: moving objects vanish from it. ``span`` (first, last
    frame) limits it to where the objects are: a camera that moved shows other views elsewhere, and
    their median is a smear no object belongs on."""
    capture = cv2.VideoCapture(str(path))
    try:
        count = int(capture.get(cv2.CAP_PROP_FRAME_COUNT))
        first, last = span if span is not None else (0, max(0, count - 1))
        frames = []
        for index in np.linspace(first, min(last, max(0, count - 1)), samples).astype(int):
            capture.set(cv2.CAP_PROP_POS_FRAMES, int(index))
            ok, frame = capture.read()
            if ok:
                frames.append(frame)
    finally:
        capture.release()
    if not frames:
        raise ValueError(f"no frame readable in {path}")
    return np.median(np.stack(frames), axis=0).astype(np.uint8)


def backgrounds_for(path: Path, plan: Schedule) -> list[np.ndarray]:
    """One background per view of the schedule (a camera that moved shows several), for
    :func:`render_synopsis`."""
    if not plan.views:
        return [background_from(path)]
    return [background_from(path, span=(view.first, view.last)) for view in plan.views]


def render_synopsis(tubes: list[Tube], plan: Schedule, background: np.ndarray | Sequence[np.ndarray],
                    timebase: Timebase, out: Path) -> Path:
    """Write the condensed video; each object carries its original time (HH:MM:SS) above its box.
    ``background`` is one image, or one per view of ``plan`` (:func:`backgrounds_for`)."""
    backgrounds = [background] if isinstance(background, np.ndarray) else list(background)
    height, width = backgrounds[0].shape[:2]
    writer = cv2.VideoWriter(str(out), cv2.VideoWriter_fourcc(*FOURCC), timebase.fps, (width, height))
    if not writer.isOpened():
        raise RuntimeError(f"no {FOURCC} writer for {out}")
    by_frame: dict[int, list[tuple[np.ndarray, tuple[int, int, int, int], int]]] = {}
    for tube in tubes:
        for frame, box in zip(tube.frames, tube.boxes, strict=True):
            if frame in tube.crops:
                by_frame.setdefault(plan.synopsis_frame(tube, frame), []).append((tube.crops[frame], box, frame))
    try:
        for index in range(max(1, plan.length)):
            canvas = backgrounds[min(plan.view_at(index), len(backgrounds) - 1)].copy()
            for crop, box, _ in by_frame.get(index, []):
                _paste(canvas, crop, box)
            for _, (x, y, _, _), frame in by_frame.get(index, []):
                stamp = timebase.at(frame).strftime("%H:%M:%S")
                cv2.putText(canvas, stamp, (max(0, x), max(12, y - 4)), cv2.FONT_HERSHEY_SIMPLEX, 0.4,
                            (255, 255, 255), 1, cv2.LINE_AA)
            writer.write(canvas)
    finally:
        writer.release()
    return out


def _paste(canvas: np.ndarray, crop: np.ndarray, box: tuple[int, int, int, int]) -> None:
    """Only the object's own (foreground) pixels replace the background."""
    x, y, w, h = box
    region = canvas[y:y + h, x:x + w]
    region[:] = np.where(crop[:, :, 3:] > 0, crop[:, :, :3], region)


def thumbnail(tube: Tube) -> bytes:
    """JPEG of the object's largest crop (the whole box, so the context around the blob shows)."""
    frame = max(tube.crops, key=lambda f: tube.crops[f].shape[0] * tube.crops[f].shape[1])
    ok, data = cv2.imencode(".jpg", tube.crops[frame][:, :, :3], [cv2.IMWRITE_JPEG_QUALITY, 85])
    if not ok:
        raise RuntimeError("JPEG encoding failed")
    return data.tobytes()


def index(tubes: list[Tube], plan: Schedule, timebase: Timebase) -> dict[str, object]:
    """The JSON index: per object, class, colour, original span and where it is in the synopsis."""
    return {
        "synopsis_frames": plan.length,
        "capped": plan.capped,
        "fps": timebase.fps,
        "objects": [{
            "object_id": tube.tube_id, "class": tube.cls, "color": tube.color,
            "first_seen": timebase.at(tube.first).isoformat(timespec="milliseconds"),
            "last_seen": timebase.at(tube.last).isoformat(timespec="milliseconds"),
            "synopsis_time": round(plan.placements[tube.tube_id].start / timebase.fps, 3),
        } for tube in tubes],
    }


def index_json(tubes: list[Tube], plan: Schedule, timebase: Timebase) -> bytes:
    return json.dumps(index(tubes, plan, timebase), ensure_ascii=False, indent=1).encode()
