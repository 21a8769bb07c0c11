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

    def learn(self, frame: np.ndarray) -> None:
        """Update the background only (warm-up before a segment's first recorded frame)."""
        self.model.apply(frame)

    def detect(self, frame: np.ndarray) -> tuple[list[Box], np.ndarray]:
        raw = self.model.apply(frame)
        _, mask = cv2.threshold(raw, 200, 255, cv2.THRESH_BINARY)
        mask = cv2.morphologyEx(mask, cv2.MORPH_OPEN, self._open)
        mask = cv2.morphologyEx(mask, cv2.MORPH_CLOSE, self._close)
        contours, _ = cv2.findContours(mask, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
        min_area = self.config.min_area_frac * frame.shape[0] * frame.shape[1]
        boxes = [cv2.boundingRect(c) for c in contours if cv2.contourArea(c) >= min_area]
        return [(int(x), int(y), int(w), int(h)) for x, y, w, h in boxes], mask

    def background(self) -> np.ndarray | None:
        return self.model.getBackgroundImage()
