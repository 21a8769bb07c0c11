"""Object class (person / vehicle / other) and dominant colour of a tube.

Class: OpenCV's built-in HOG people detector (Dalal-Triggs, ships inside OpenCV, so nothing is
downloaded) votes on a few upright crops; size, aspect and speed decide the rest, in frame-height
units so the rules hold at any resolution: people are upright and slow, vehicles wide or fast,
anything else (animals, carts, bags) is "other".
Colour: the median of the foreground pixels sampled along the tube, named by hue, saturation, value.
"""

from __future__ import annotations

import statistics

import cv2
import numpy as np

from video.detect import Box
from video.track import Tube

_HOG: cv2.HOGDescriptor | None = None


def _hog() -> cv2.HOGDescriptor:
    global _HOG
    if _HOG is None:
        _HOG = cv2.HOGDescriptor()
        _HOG.setSVMDetector(cv2.HOGDescriptor_getDefaultPeopleDetector())
    return _HOG


def hog_person(frame: np.ndarray, box: Box) -> bool:
    """Does the HOG people detector find a person in (a padded crop around) ``box``?"""
    x, y, w, h = box
    pad_x, pad_y = w // 2 + 4, h // 5 + 4
    crop = frame[max(0, y - pad_y):y + h + pad_y, max(0, x - pad_x):x + w + pad_x]
    if crop.size == 0:
        return False
    scale = 160 / crop.shape[0]  # the detector's window is 64x128
    crop = cv2.resize(crop, (max(72, round(crop.shape[1] * scale)), 160))
    found, _ = _hog().detectMultiScale(crop, winStride=(8, 8), padding=(8, 8), scale=1.1)
    return len(found) > 0


_HUE_NAMES = ((8, "red"), (20, "orange"), (35, "yellow"), (85, "green"), (100, "cyan"), (130, "blue"),
              (160, "purple"), (180, "red"))
COLOR_NAMES = ("black", "white", "gray", *dict.fromkeys(name for _, name in _HUE_NAMES))


def _name_pixels(hsv: np.ndarray) -> np.ndarray:
    """Index into COLOR_NAMES for each HSV pixel (N x 3)."""
    hue, sat, val = hsv[:, 0].astype(int), hsv[:, 1].astype(int), hsv[:, 2].astype(int)
    chroma = np.searchsorted([limit for limit, _ in _HUE_NAMES], hue, side="right")
    chroma_index = np.array([COLOR_NAMES.index(name) for _, name in _HUE_NAMES])[np.minimum(chroma, 7)]
    grey = np.where(val > 185, COLOR_NAMES.index("white"), COLOR_NAMES.index("gray"))
    return np.where(val < 60, COLOR_NAMES.index("black"), np.where(sat < 45, grey, chroma_index))


def sample_color(frame: np.ndarray, mask: np.ndarray, box: Box) -> np.ndarray | None:
    """Votes per colour name of the foreground pixels inside ``box`` (a pixel-wise vote, because the
    mean of a white shirt, a face and dark trousers is no colour the object has)."""
    x, y, w, h = box
    pixels = frame[y:y + h, x:x + w][mask[y:y + h, x:x + w] > 0]
    if len(pixels) < 10:
        return None
    hsv = cv2.cvtColor(pixels[::3].reshape(-1, 1, 3), cv2.COLOR_BGR2HSV).reshape(-1, 3)
    return np.bincount(_name_pixels(hsv), minlength=len(COLOR_NAMES))


def dominant_color(tube: Tube) -> str:
    if not tube.color_samples:
        return "unknown"
    votes = np.sum(tube.color_samples, axis=0)
    return COLOR_NAMES[int(np.argmax(votes))]


def classify(tube: Tube, frame_height: int, fps: float) -> str:
    widths = [b[2] for b in tube.boxes]
    heights = [b[3] for b in tube.boxes]
    w, h = statistics.median(widths) / frame_height, statistics.median(heights) / frame_height
    aspect = h / max(w, 1e-6)
    vx, vy = _mean_velocity(tube)
    speed = float(np.hypot(vx, vy)) * fps / frame_height  # frame heights per second
    if tube.hog_tries and tube.hog_hits * 2 >= tube.hog_tries and aspect > 1.2:
        return "person"
    if aspect >= 1.6 and 0.06 <= h <= 0.85 and speed < 1.0:
        return "person"
    if (aspect <= 0.9 and w >= 0.12) or (speed >= 1.0 and w >= 0.08 and aspect < 1.2):
        return "vehicle"
    return "other"


def _mean_velocity(tube: Tube) -> tuple[float, float]:
    if len(tube.frames) < 2:
        return 0.0, 0.0
    (x0, y0, w0, h0), (x1, y1, w1, h1) = tube.boxes[0], tube.boxes[-1]
    dt = tube.last - tube.first
    return ((x1 + w1 / 2) - (x0 + w0 / 2)) / dt, ((y1 + h1 / 2) - (y0 + h0 / 2)) / dt


def label(tube: Tube, frame_height: int, fps: float) -> Tube:
    tube.cls = classify(tube, frame_height, fps)
    tube.color = dominant_color(tube)
    return tube
