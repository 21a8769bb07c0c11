"""The analysis pass: frames -> labelled tubes, over a whole video or one time segment of it.

Segments let Spark spread one long video over cores: each segment warms its background model on the
frames just before it (so its first frames are not all "foreground"), records tubes only inside its
own range, and :func:`stitch` joins a tube that reaches a segment's end to the one that starts at the
next segment's beginning in the same place. Labels (class, colour) are given after stitching, on the
whole tube.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np

from video.classify import hog_person, label, sample_color
from video.detect import Detector, DetectorConfig
from video.motion import MOVED, MotionConfig, MotionStats, Stabilizer, Verdict, verdict
from video.track import Tracker, Tube, iou

COLOR_EVERY = 3  # sample colour on every 3rd observation of a tube
HOG_AT = (3, 10, 25, 50)  # run the HOG people detector at these observation counts of upright tubes


class VideoError(RuntimeError):
    """A video that cannot be analysed (missing, corrupt, unsupported codec): reported, not crashed on."""


@dataclass(frozen=True)
class AnalysisConfig:
    detector: DetectorConfig = field(default_factory=DetectorConfig)
    max_missed_s: float = 1.0
    min_tube_s: float = 0.3
    warmup_frames: int = 50
    keep_crops: bool = True
    hog: bool = True
    motion: MotionConfig | None = field(default_factory=MotionConfig)  # None: assume a fixed camera
    settle_rate: float = 0.1  # background learning rate while settling after a view change


@dataclass(frozen=True)
class VideoInfo:
    fps: float
    frames: int
    width: int
    height: int


def probe(path: Path) -> VideoInfo:
    """Frame rate, count and size; a VideoError when OpenCV cannot decode the file."""
    if not path.exists():
        raise VideoError(f"video not found: {path}")
    capture = cv2.VideoCapture(str(path))
    try:
        if not capture.isOpened():
            raise VideoError(f"cannot open video (corrupt or unsupported codec): {path.name}")
        ok, frame = capture.read()
        if not ok or frame is None:
            raise VideoError(f"no decodable frame in {path.name} (corrupt or unsupported codec)")
        fps = capture.get(cv2.CAP_PROP_FPS) or 25.0
        frames = int(capture.get(cv2.CAP_PROP_FRAME_COUNT))
        if frames <= 0:
            raise VideoError(f"unknown frame count in {path.name}")
        return VideoInfo(float(fps), frames, frame.shape[1], frame.shape[0])
    finally:
        capture.release()


def read_frames(path: Path, start: int = 0, end: int | None = None) -> Iterator[tuple[int, np.ndarray]]:
    capture = cv2.VideoCapture(str(path))
    try:
        if start:
            capture.set(cv2.CAP_PROP_POS_FRAMES, start)
        index = start
        while end is None or index < end:
            ok, frame = capture.read()
            if not ok:
                break
            yield index, frame
            index += 1
    finally:
        capture.release()


@dataclass(frozen=True)
class SegmentResult:
    tubes: list[Tube]
    motion: MotionStats


def analyze_frames(frames: Iterable[tuple[int, np.ndarray]], fps: float, config: AnalysisConfig | None = None,
                   record_from: int = 0) -> list[Tube]:
    """Unlabelled tubes from ``(index, frame)`` pairs; frames before ``record_from`` only train the
    background model."""
    return analyze_frames_motion(frames, fps, config, record_from).tubes


def analyze_frames_motion(frames: Iterable[tuple[int, np.ndarray]], fps: float, config: AnalysisConfig | None = None,
                          record_from: int = 0) -> SegmentResult:
    """:func:`analyze_frames` plus what the camera did (video.motion): shake is undone before the
    background model sees a frame; a view change re-learns the background, ends every open tube
    (what follows is another view) and the frames until it settles show no objects."""
    config = config or AnalysisConfig()
    detector = Detector(config.detector)
    stabilizer = Stabilizer(config.motion, fps) if config.motion is not None else None
    settle = round((config.motion.settle_s if config.motion else 0) * fps)
    settled_at = -1
    stats = MotionStats()
    tracker: Tracker | None = None
    for index, raw in frames:
        registered = stabilizer.register(raw) if stabilizer is not None else None
        frame, valid = (registered.frame, registered.valid) if registered is not None else (raw, None)
        if registered is not None and registered.state == MOVED:
            detector.relearn(raw)
            settled_at = index + settle
            if tracker is not None:
                tracker.cut()
        if index < record_from:
            if registered is None or registered.state != MOVED:
                detector.learn(frame)
            continue
        if tracker is None:
            tracker = Tracker(max_missed=max(2, round(config.max_missed_s * fps)),
                              min_observations=max(3, round(config.min_tube_s * fps)),
                              gate=1.2 if fps >= 10 else 2.0,
                              max_area=config.detector.max_box * frame.shape[0] * frame.shape[1])
        if registered is not None:
            stats.add(index, registered, lost=index <= settled_at)
        if index <= settled_at:
            if registered is not None and registered.state != MOVED:
                detector.learn(frame, config.settle_rate)
            continue
        boxes, mask = detector.detect(frame, valid)
        for tube, box in tracker.update(index, boxes):
            _observe(tube, frame, mask, box, index, config)
    return SegmentResult(tracker.finish() if tracker is not None else [], stats)


def _observe(tube: Tube, frame: np.ndarray, mask: np.ndarray, box: tuple[int, int, int, int], index: int,
             config: AnalysisConfig) -> None:
    n = len(tube.frames)
    if n % COLOR_EVERY == 1 and (color := sample_color(frame, mask, box)) is not None:
        tube.color_samples.append(color)
    x, y, w, h = box
    if config.hog and n in HOG_AT and h > 1.2 * w:
        tube.hog_tries += 1
        tube.hog_hits += hog_person(frame, box)
    if config.keep_crops:
        crop = frame[y:y + h, x:x + w]
        tube.crops[index] = np.dstack([crop, mask[y:y + h, x:x + w]])


def analyze_segment(path: Path, start: int, end: int, fps: float, config: AnalysisConfig | None = None) -> list[Tube]:
    """Tubes observed in frames ``[start, end)``, after warming the background on frames before it."""
    return analyze_segment_motion(path, start, end, fps, config).tubes


def analyze_segment_motion(path: Path, start: int, end: int, fps: float,
                           config: AnalysisConfig | None = None) -> SegmentResult:
    """:func:`analyze_segment` with the segment's camera-motion counts (they add up with
    :meth:`MotionStats.merge` into the whole video's, for :func:`video.motion.verdict`)."""
    config = config or AnalysisConfig()
    warm = max(0, start - config.warmup_frames)
    return analyze_frames_motion(read_frames(path, warm, end), fps, config, record_from=start)


def segments(frames: int, count: int) -> list[tuple[int, int]]:
    bounds = np.linspace(0, frames, count + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in itertools.pairwise(bounds) if b > a]


def stitch(parts: list[list[Tube]], borders: list[int], max_gap: int = 3) -> list[Tube]:
    """Join tubes across segment borders: a tube ending within ``max_gap`` frames of a border continues
    as the tube starting within ``max_gap`` after it whose first box overlaps its predicted box."""
    merged: list[Tube] = list(parts[0]) if parts else []
    for border, part in zip(borders, parts[1:], strict=True):
        open_ends = [t for t in merged if t.last >= border - max_gap]
        for tube in sorted(part, key=lambda t: t.first):
            best, best_iou = None, 0.2
            if tube.first <= border + max_gap:
                for candidate in open_ends:
                    overlap = iou(candidate.predict(tube.first), tube.boxes[0])
                    if overlap > best_iou:
                        best, best_iou = candidate, overlap
            if best is None:
                merged.append(tube)
            else:
                best.extend(tube)
                open_ends.remove(best)
    return merged


def finalize(tubes: list[Tube], info: VideoInfo, min_observations: int | None = None) -> list[Tube]:
    """Number tubes by first appearance and label them (class, colour)."""
    minimum = min_observations or 1
    ordered = sorted((t for t in tubes if len(t.frames) >= minimum), key=lambda t: (t.first, t.boxes[0]))
    for number, tube in enumerate(ordered):
        tube.tube_id = number
        label(tube, info.height, info.fps)
    return ordered


@dataclass(frozen=True)
class Analysis:
    info: VideoInfo
    tubes: list[Tube]
    motion: MotionStats
    verdict: Verdict  # camera_motion, reliable, reason: what the task reports


def analyze(path: Path, config: AnalysisConfig | None = None, parts: int = 1) -> Analysis:
    """The whole video in one process (``parts`` > 1 exercises the segment-and-stitch path)."""
    config = config or AnalysisConfig()
    info = probe(path)
    bounds = segments(info.frames, parts)
    results = [analyze_segment_motion(path, a, b, info.fps, config) for a, b in bounds]
    motion = functools.reduce(MotionStats.merge, (r.motion for r in results), MotionStats())
    tubes = finalize(stitch([r.tubes for r in results], [a for a, _ in bounds[1:]]), info)
    return Analysis(info, tubes, motion, verdict(motion, info.fps, config.motion))


def analyze_video(path: Path, config: AnalysisConfig | None = None, parts: int = 1) -> tuple[VideoInfo, list[Tube]]:
    result = analyze(path, config, parts)
    return result.info, result.tubes
