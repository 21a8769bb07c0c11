"""Synthetic surveillance scenes with ground truth, for accuracy tests and the benchmark.

Real annotated footage cannot be downloaded here, and a clip says nothing exact about when each object
entered or left. A generated street does: people on the pavements, vehicles on the road and small
"other" objects (a dog, a cart) cross the view at known frames, a lamp post in the foreground hides
them for a moment (occlusion), and long idle stretches have no activity at all (what synopsis
removes). Frames are drawn on demand, so an 8-hour-equivalent scene costs no memory.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np

# Named colours (BGR) the generator paints with; the analysis must name them back.
PALETTE: dict[str, tuple[int, int, int]] = {
    "red": (40, 40, 210), "blue": (200, 70, 30), "green": (40, 170, 40),
    "yellow": (30, 210, 230), "white": (240, 240, 240), "black": (25, 25, 25),
}
# (height, width) ranges as fractions of the frame height, and speed in frame heights per second.
_SHAPES = {
    "person": ((0.12, 0.16), (0.045, 0.055), (0.08, 0.14)),
    "vehicle": ((0.10, 0.13), (0.22, 0.30), (0.35, 0.55)),
    "other": ((0.045, 0.055), (0.07, 0.08), (0.12, 0.2)),
}
# Lanes (vertical centre as a fraction of the height) each class uses: pavements, road, verge.
_LANES = {"person": (0.30, 0.88), "vehicle": (0.52, 0.68), "other": (0.40, 0.80)}
# Fixed lanes of the short street scene, apart by more than the detector's closing kernel, so
# objects only merge when they really overlap.
_STREET_LANES = {"person": (0.2, 0.88), "vehicle": (0.52, 0.68), "other": (0.37, 0.37)}


@dataclass(frozen=True)
class SceneObject:
    """One object's ground truth: it crosses the frame horizontally at constant speed."""

    object_id: int
    cls: str
    color: str
    enter_frame: int
    y: float  # centre, pixels
    width: float
    height: float
    speed: float  # pixels per frame, signed (negative: right to left)
    frame_width: int

    @property
    def crossing_frames(self) -> int:
        return math.ceil((self.frame_width + self.width) / abs(self.speed))

    @property
    def first_frame(self) -> int:
        return self.enter_frame

    @property
    def last_frame(self) -> int:
        return self.enter_frame + self.crossing_frames - 1

    def box(self, frame: int) -> tuple[int, int, int, int] | None:
        """(x, y, w, h) of the visible part at ``frame``, or None when outside the view."""
        if not self.first_frame <= frame <= self.last_frame:
            return None
        travelled = (frame - self.enter_frame) * abs(self.speed)
        left = -self.width + travelled if self.speed > 0 else self.frame_width - travelled
        x0, x1 = max(0.0, left), min(float(self.frame_width), left + self.width)
        if x1 - x0 < 1:
            return None
        top = self.y - self.height / 2
        return round(x0), round(top), round(x1 - x0), round(self.height)


@dataclass(frozen=True)
class Lighting:
    """What the light and the weather do to every pixel: what a camera at dusk, at night or in the
    rain sees, and the changes (clouds, street lights switching on) that must not become objects."""

    name: str = "day"
    gain: float = 1.0  # brightness multiplier
    tint: tuple[float, float, float] = (1.0, 1.0, 1.0)  # BGR multipliers
    noise: float = 2.0  # sensor noise (standard deviation, grey levels)
    rain: int = 0  # rain streaks per frame
    drift: float = 0.0  # amplitude of a slow brightness swing (clouds), as a share of the gain
    drift_period_s: float = 20.0
    step_at_s: float | None = None  # a sudden change (lights switched on or off) at this time ...
    step_gain: float = 1.0  # ... multiplying the brightness from then on

    def gain_at(self, seconds: float) -> float:
        gain = self.gain * (1 + self.drift * math.sin(2 * math.pi * seconds / self.drift_period_s))
        return gain * (self.step_gain if self.step_at_s is not None and seconds >= self.step_at_s else 1.0)


LIGHTING: dict[str, Lighting] = {
    "day": Lighting(),
    "dusk": Lighting("dusk", gain=0.6, tint=(0.8, 0.95, 1.15), noise=4.0, drift=0.05),
    "night": Lighting("night", gain=0.3, tint=(1.1, 1.0, 0.9), noise=6.0),
    "rain": Lighting("rain", gain=0.75, tint=(1.05, 1.0, 0.95), noise=4.0, rain=60),
}


@dataclass
class Scene:
    width: int
    height: int
    fps: float
    frames: int
    objects: list[SceneObject]
    occluders: list[tuple[int, int]] = field(default_factory=list)  # (x, width) of lamp posts
    seed: int = 0
    lighting: Lighting = field(default_factory=Lighting)

    def __post_init__(self) -> None:
        rng = np.random.default_rng(self.seed)
        self.background = _background(self.width, self.height, rng)
        self._noise = [rng.normal(0, self.lighting.noise, (self.height, self.width, 3)).astype(np.int16)
                       for _ in range(7)]

    def frame(self, index: int) -> np.ndarray:
        image = self.background.copy()
        for obj in self.objects:
            if obj.first_frame <= index <= obj.last_frame:
                _draw(image, obj, index)
        for x, w in self.occluders:
            cv2.rectangle(image, (x, 0), (x + w - 1, self.height - 1), (70, 80, 90), -1)
        light = self.lighting
        if light != LIGHTING["day"]:
            scale = np.float32(light.gain_at(index / self.fps)) * np.array(light.tint, dtype=np.float32)
            image = np.clip(image * scale, 0, 255).astype(np.uint8)
        if light.rain:
            _rain(image, light.rain, np.random.default_rng((self.seed, index)))
        noisy = image.astype(np.int16) + self._noise[index % len(self._noise)]
        return np.clip(noisy, 0, 255).astype(np.uint8)

    def iter_frames(self, start: int = 0, end: int | None = None) -> Iterator[tuple[int, np.ndarray]]:
        for index in range(start, self.frames if end is None else min(end, self.frames)):
            yield index, self.frame(index)

    def write(self, path: Path, fourcc: str = "mp4v") -> Path:
        writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*fourcc), self.fps, (self.width, self.height))
        if not writer.isOpened():
            raise RuntimeError(f"cannot write {path} with {fourcc}")
        try:
            for _, image in self.iter_frames():
                writer.write(image)
        finally:
            writer.release()
        return path

    def visible_objects(self) -> list[SceneObject]:
        return [obj for obj in self.objects if obj.first_frame < self.frames]


def _background(width: int, height: int, rng: np.random.Generator) -> np.ndarray:
    """A static street: sky-to-ground gradient, a darker road band, some fixed texture."""
    ramp = np.linspace(150, 110, height, dtype=np.float32)[:, None, None]
    image = np.repeat(np.repeat(ramp, width, axis=1), 3, axis=2)
    image[int(height * 0.45):int(height * 0.75)] -= 25  # road
    image += rng.normal(0, 6, (height, width, 1)).astype(np.float32)
    return np.clip(cv2.GaussianBlur(image, (5, 5), 0), 0, 255).astype(np.uint8)


def _rain(image: np.ndarray, streaks: int, rng: np.random.Generator) -> None:
    """Short, thin, bright, slanted streaks at random places: each lasts one frame."""
    height, width = image.shape[:2]
    xs, ys = rng.integers(0, width, streaks), rng.integers(0, height, streaks)
    lengths = rng.integers(6, 16, streaks)
    for x, y, n in zip(xs, ys, lengths, strict=True):
        cv2.line(image, (int(x), int(y)), (int(x) + int(n) // 4, int(y) + int(n)), (200, 200, 200), 1, cv2.LINE_AA)


def _draw(image: np.ndarray, obj: SceneObject, frame: int) -> None:
    travelled = (frame - obj.enter_frame) * abs(obj.speed)
    left = -obj.width + travelled if obj.speed > 0 else obj.frame_width - travelled
    x0, y0 = round(left), round(obj.y - obj.height / 2)
    x1, y1 = round(left + obj.width), round(obj.y + obj.height / 2)
    colour = PALETTE[obj.color]
    if obj.cls == "person":  # head, torso, legs that swing
        head = max(2, round(obj.width / 2.4))
        cx = (x0 + x1) // 2
        cv2.circle(image, (cx, y0 + head), head, (120, 150, 190), -1)
        cv2.rectangle(image, (x0, y0 + 2 * head), (x1, round(y0 + obj.height * 0.62)), colour, -1)
        swing = round(obj.width * 0.3 * math.sin(frame / 3))
        cv2.rectangle(image, (x0 + swing // 2, round(y0 + obj.height * 0.62)), (cx - 1, y1), (60, 50, 40), -1)
        cv2.rectangle(image, (cx + 1, round(y0 + obj.height * 0.62)), (x1 - swing // 2, y1), (60, 50, 40), -1)
    elif obj.cls == "vehicle":  # body, windows, wheels
        cv2.rectangle(image, (x0, y0 + round(obj.height * 0.25)), (x1, y1 - round(obj.height * 0.15)), colour, -1)
        cv2.rectangle(image, (x0 + round(obj.width * 0.2), y0), (x1 - round(obj.width * 0.2), y0 + round(
            obj.height * 0.3)), colour, -1)
        wheel = max(2, round(obj.height * 0.15))
        for wx in (x0 + round(obj.width * 0.2), x1 - round(obj.width * 0.2)):
            cv2.circle(image, (wx, y1 - wheel), wheel, (20, 20, 20), -1)
    else:
        cv2.ellipse(image, ((x0 + x1) // 2, (y0 + y1) // 2), ((x1 - x0) // 2, (y1 - y0) // 2), 0, 0, 360, colour, -1)


def make_object(rng: random.Random, object_id: int, cls: str, enter_frame: int, width: int, height: int,
                fps: float, lane: float | None = None, color: str | None = None,
                direction: int | None = None) -> SceneObject:
    (h0, h1), (w0, w1), (s0, s1) = _SHAPES[cls]
    lo, hi = _LANES[cls]
    speed = rng.uniform(s0, s1) * height / fps * (direction or rng.choice((-1, 1)))
    return SceneObject(object_id, cls, color or rng.choice(list(PALETTE)), enter_frame,
                       (lane if lane is not None else rng.uniform(lo, hi)) * height,
                       rng.uniform(w0, w1) * height, rng.uniform(h0, h1) * height, speed, width)


def street_scene(seconds: float = 60, n_objects: int = 8, seed: int = 1, width: int = 640, height: int = 360,
                 fps: float = 25, occluder: bool = True, idle_fraction: float = 0.3,
                 lighting: Lighting | None = None) -> Scene:
    """A short scene: objects of every class enter at spread-out times, one at a time per lane band,
    with an idle stretch at the start (``idle_fraction`` of the length) and a lamp post mid-frame."""
    rng = random.Random(seed)
    frames = round(seconds * fps)
    classes = ["person", "vehicle", "other"]
    start = round(frames * idle_fraction)
    objects: list[SceneObject] = []
    # Spread entries so that at most two objects share the view and they use separate lanes.
    slots = np.linspace(start, frames * 0.8, n_objects).astype(int)
    for i, enter in enumerate(slots):
        cls = classes[i % 3]
        lane = _STREET_LANES[cls][(i // 3) % 2]
        # One-way lanes: objects sharing a lane never meet head-on (the lamp post is the occlusion).
        direction = 1 if lane < 0.5 else -1
        objects.append(make_object(rng, i, cls, int(enter), width, height, fps, lane=lane, direction=direction))
    occluders = [(width // 2 - 6, 12)] if occluder else []
    return Scene(width, height, fps, frames, objects, occluders, seed, lighting or Lighting())


def sparse_scene(hours: float = 8.0, objects_per_hour: float = 15, seed: int = 8, width: int = 320,
                 height: int = 180, fps: float = 2.0) -> Scene:
    """An 8-hour-equivalent sparse scene sampled at ``fps`` (a low-rate archive, as many recorders keep
    at night): Poisson arrivals, random classes and lanes, mostly empty."""
    rng = random.Random(seed)
    frames = round(hours * 3600 * fps)
    objects: list[SceneObject] = []
    t = 0.0
    while True:
        t += rng.expovariate(objects_per_hour / 3600)
        if t * fps >= frames * 0.98:
            break
        cls = rng.choice(["person", "person", "vehicle", "vehicle", "other"])
        objects.append(make_object(rng, len(objects), cls, round(t * fps), width, height, fps))
    return Scene(width, height, fps, frames, objects, [], seed)
