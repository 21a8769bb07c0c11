"""Moving-object extraction: background subtraction (MOG2 or KNN), morphology, contours.

Why this and not a neural detector: no model downloads are possible, and a fixed surveillance camera
is exactly the case background subtraction is good at (~150 fps at 640x360 on one core). The mask is
cleaned with an opening (salt noise, sensor flicker) and a closing (re-joins limbs and windows into
one blob), shadows (MOG2 marks them 127) are dropped, and blobs smaller than ``min_area_frac`` of
the frame are ignored.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

Box = tuple[int, int, int, int]  # x, y, w, h


@dataclass(frozen=True)
class DetectorConfig:
    method: str = "mog2"  # or "knn"
    history: int = 300
    var_threshold: float = 25.0
    min_area_frac: float = 0.0006
    open_kernel: int = 3
    close_kernel: int = 9
    # A frame is "camera motion" (a jolt) or a light change, not objects, when the whole image shifted
    # by more than ``max_shift`` of its width against the previous frame (phase correlation; moving
    # objects alone shift it far less) or more than ``max_foreground`` of it is foreground: it yields
    # no blobs and re-learns the background. A blob whose box covers more than ``max_box`` of the frame
    # is a smeared background (slow pan), never one object of a fixed camera.
    max_foreground: float = 0.35
    max_shift: float = 0.02
    jolt_foreground: float = 0.03  # ... and a shift that leaves less foreground than this changed nothing
    max_box: float = 0.5
    # Night footage: objects keep a third of their daytime contrast while the sensor noise grows, so
    # single noisy pixels fall either side of the threshold and objects came out in pieces (recall 0.62-0.75
    # on night street scenes). A view darker than ``dark_level`` (mean grey level, 0-255) is smoothed with a
    # ``dark_blur`` Gaussian first (recall 1.0). Only then: in rain the blur merged streaks into objects.
    dark_level: float = 50.0
    dark_blur: int = 5


class Detector:
    """Feeds frames to a background model and returns the moving blobs' boxes and the mask."""

    def __init__(self, config: DetectorConfig | None = None) -> None:
        self.config = config = config or DetectorConfig()
        if config.method == "knn":
            self.model = cv2.createBackgroundSubtractorKNN(history=config.history, detectShadows=True)
        elif config.method == "mog2":
            self.model = cv2.createBackgroundSubtractorMOG2(history=config.history,
                                                            varThreshold=config.var_threshold, detectShadows=True)
        else:
            raise ValueError(f"unknown background subtraction method {config.method!r}")
        self._open = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (config.open_kernel, config.open_kernel))
        self._close = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (config.close_kernel, config.close_kernel))
        self.camera_moves = 0  # frames dropped as camera motion
        self._previous: np.ndarray | None = None
        self.dark: bool | None = None  # decided on the first frame of a view (see DetectorConfig.dark_level)

    def _prepare(self, frame: np.ndarray) -> np.ndarray:
        """The frame as the background model sees it: smoothed when the view is dark."""
        if self.dark is None:
            self.dark = float(frame.mean()) < self.config.dark_level
        if self.dark:
            size = self.config.dark_blur
            return cv2.GaussianBlur(frame, (size, size), 0)
        return frame

    def learn(self, frame: np.ndarray, rate: float = -1) -> None:
        """Update the background only (warm-up before a segment's first recorded frame; settling after
        a view change, at a faster ``rate`` so what moved away leaves no ghost)."""
        self.model.apply(self._prepare(frame), learningRate=rate)
        self._previous = None

    def relearn(self, frame: np.ndarray) -> None:
        """The camera shows another view: it is the background from now on (and may be dark or not)."""
        self.dark = None
        self.model.apply(self._prepare(frame), learningRate=1.0)
        self._previous = None

    def detect(self, frame: np.ndarray, valid: np.ndarray | None = None) -> tuple[list[Box], np.ndarray]:
        """Blobs of ``frame``; ``valid`` (0 = no picture there, e.g. the edge a stabilising warp left
        empty) keeps those pixels out of the foreground."""
        moved = self._camera_moved(frame)
        frame = self._prepare(frame)
        raw = self.model.apply(frame)
        _, mask = cv2.threshold(raw, 200, 255, cv2.THRESH_BINARY)
        if valid is not None:
            mask = cv2.bitwise_and(mask, valid)
        if moved and cv2.countNonZero(mask) > self.config.jolt_foreground * mask.size:
            self.model.apply(frame, learningRate=1.0)  # re-learn the background from the new view
            self.camera_moves += 1
            return [], np.zeros_like(mask)
        mask = cv2.morphologyEx(mask, cv2.MORPH_OPEN, self._open)
        mask = cv2.morphologyEx(mask, cv2.MORPH_CLOSE, self._close)
        if cv2.countNonZero(mask) > self.config.max_foreground * mask.size:
            self.model.apply(frame, learningRate=1.0)
            self.camera_moves += 1
            return [], np.zeros_like(mask)
        contours, _ = cv2.findContours(mask, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
        frame_area = frame.shape[0] * frame.shape[1]
        min_area = self.config.min_area_frac * frame_area
        boxes = [box for c in contours if cv2.contourArea(c) >= min_area
                 if (box := cv2.boundingRect(c))[2] * box[3] <= self.config.max_box * frame_area]
        return [(int(x), int(y), int(w), int(h)) for x, y, w, h in boxes], mask

    def _camera_moved(self, frame: np.ndarray) -> bool:
        small = cv2.cvtColor(cv2.resize(frame, (160, max(8, 160 * frame.shape[0] // frame.shape[1])),
                                        interpolation=cv2.INTER_AREA), cv2.COLOR_BGR2GRAY).astype(np.float32)
        previous, self._previous = self._previous, small
        if previous is None or previous.shape != small.shape:
            return False
        (dx, dy), _ = cv2.phaseCorrelate(previous, small)
        if np.hypot(dx, dy) / small.shape[1] <= self.config.max_shift:
            return False
        # The peak may be a large moving object on a plain background: it is the camera only if
        # undoing the shift makes the whole view match better than leaving it.
        h, w = small.shape
        shifted = cv2.warpAffine(previous, np.float32([[1, 0, dx], [0, 1, dy]]), (w, h))
        m = max(2, int(np.ceil(max(abs(dx), abs(dy)))))
        inner = (slice(m, h - m), slice(m, w - m))
        if h <= 2 * m or w <= 2 * m:
            return False
        compensated = float(np.mean(np.abs(shifted[inner] - small[inner])))
        raw = float(np.mean(np.abs(previous[inner] - small[inner])))
        return compensated < 0.6 * raw

    def background(self) -> np.ndarray | None:
        return self.model.getBackgroundImage()
