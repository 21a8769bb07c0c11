"""What one camera segment looks like to an operator: ``ok``, ``undecodable``, ``black``, ``blurred`` or ``frozen``
(issue 28, the video half).

A segment is decoded with the video engine's decoder (OpenCV's FFmpeg, as :func:`video.analyze.read_frames`),
*whole*: every frame is grabbed, and a few (``frames_sampled``, evenly spread) are kept as greyscale pictures and
measured. It is

* ``undecodable`` when it does not open, has no frame, or ends early: fewer than ``min_decoded_share`` of the
  frames its container promises decode (an upload cut short still opens and plays its first seconds);
* ``black`` when the sampled frames' mean luminance is under ``black_luminance`` (a dead sensor);
* ``blurred`` when the sharpest sampled frame's variance of the Laplacian is under ``blur_laplacian`` (a fogged or
  defocused lens: no edge, no sensor noise left);
* ``frozen`` when consecutive sampled frames differ, as the median over the pairs of their mean absolute difference
  of grey levels, by less than ``frozen_diff`` (a hung encoder sends one picture; a live camera's sensor noise alone
  differs by more). The median, not the largest: the encoder's key frames make one pair of a frozen segment differ
  by as much as 0.7 grey levels at 640x360, while every pair of a live one differs by 1 or more;
* ``ok`` otherwise.

Black is checked first (a black frame is also flat and still), then blurred (a blurred camera's idle street loses
its noise and may look still), then frozen (a frozen picture is sharp). The thresholds are
``[monitoring.video]``'s; their defaults were measured on the camera simulator's segments in every light (day,
dusk, night, rain) and at every size the tests use: ``tests/monitoring/test_video_quality.py`` keeps them honest.
"""

from __future__ import annotations

import itertools
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

log = logging.getLogger(__name__)

OK, UNDECODABLE, BLACK, BLURRED, FROZEN = "ok", "undecodable", "black", "blurred", "frozen"
RESULTS = (OK, UNDECODABLE, BLACK, BLURRED, FROZEN)
BAD = frozenset((UNDECODABLE, BLACK, BLURRED, FROZEN))
MAX_PIXELS = 20_000_000
"""A frame larger than this is no camera's: the segment is not decoded further (undecodable)."""


@dataclass(frozen=True)
class Thresholds:
    frames_sampled: int = 8
    black_luminance: float = 8.0
    blur_laplacian: float = 28.0
    frozen_diff: float = 0.4
    min_decoded_share: float = 0.9


@dataclass(frozen=True)
class Measures:
    """What the judge measured of a segment (None: it could not be decoded)."""

    promised: int
    """Frames the container says it holds (0: it does not say)."""
    decoded: int
    luminance: float
    """Mean grey level of the sampled frames."""
    laplacian: float
    """Largest variance of the Laplacian over the sampled frames."""
    diff: float
    """Median over consecutive sampled frames of their mean absolute difference (0 with one sampled frame)."""


def measure(path: Path, frames_sampled: int) -> Measures | None:
    """Decode the segment at ``path`` whole and measure ``frames_sampled`` evenly spread frames; None when not one
    frame decodes."""
    capture = cv2.VideoCapture(str(path))
    try:
        if not capture.isOpened():
            return None
        promised = max(0, int(capture.get(cv2.CAP_PROP_FRAME_COUNT) or 0))
        wanted = _positions(promised, frames_sampled)
        kept: list[np.ndarray] = []
        stride = 1  # a container that does not say its length: every stride-th frame, thinned as it goes on
        decoded = 0
        while capture.grab():
            if decoded in wanted if wanted else decoded % stride == 0:
                ok, frame = capture.retrieve()
                if not ok or frame is None or frame.ndim != 3 or frame.shape[0] * frame.shape[1] > MAX_PIXELS:
                    return None
                kept.append(cv2.cvtColor(frame, cv2.COLOR_BGR2GRAY))
                if not wanted and len(kept) > 2 * frames_sampled:
                    kept, stride = kept[::2], stride * 2
            decoded += 1
    finally:
        capture.release()
    if not wanted and kept:
        kept = [kept[i] for i in sorted(_positions(len(kept), frames_sampled))]
    if decoded == 0 or not kept:
        return None
    laplacian = max(float(cv2.Laplacian(g, cv2.CV_64F).var()) for g in kept)
    diffs = [float(cv2.absdiff(a, b).mean()) for a, b in itertools.pairwise(kept)]
    return Measures(promised, decoded, float(np.mean([g.mean() for g in kept])), laplacian,
                    float(np.median(diffs)) if diffs else 0.0)


def _positions(frames: int, samples: int) -> set[int]:
    if frames <= 0:
        return set()
    return {int(i) for i in np.linspace(0, frames - 1, min(samples, frames)).round()}


def verdict(measures: Measures | None, limits: Thresholds) -> str:
    if measures is None or (measures.promised and measures.decoded < limits.min_decoded_share * measures.promised):
        return UNDECODABLE
    if measures.luminance < limits.black_luminance:
        return BLACK
    if measures.laplacian < limits.blur_laplacian:
        return BLURRED
    if measures.decoded > 1 and measures.diff < limits.frozen_diff:
        return FROZEN
    return OK


def judge_file(path: Path, limits: Thresholds) -> str:
    try:
        return verdict(measure(path, limits.frames_sampled), limits)
    except (cv2.error, ValueError, OSError) as exc:  # the decoder refused it outright
        log.debug("segment %s not decodable: %s", path.name, exc)
        return UNDECODABLE


def judge(data: bytes, limits: Thresholds, name: str = "segment.webm") -> str:
    """The result for a segment's bytes (decoded from a private temporary file: the decoder reads files)."""
    if not data:
        return UNDECODABLE
    fd, tmp = tempfile.mkstemp(prefix="monitor-video-", suffix=Path(name).suffix or ".webm")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        return judge_file(Path(tmp), limits)
    finally:
        Path(tmp).unlink(missing_ok=True)
