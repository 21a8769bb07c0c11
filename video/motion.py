"""Camera motion: find it, undo it where it can be undone, and say so where it cannot.

Background subtraction assumes a fixed camera. A camera that shakes (wind, a passing lorry) shifts
the whole view by a few pixels: every edge becomes "foreground". A camera that pans, zooms or cuts
to another view (PTZ tours, hand-held footage, an edited clip) shows a new background altogether.

Each frame is registered against a reference view: corners of the reference (Shi-Tomasi) are
followed into the frame with pyramidal Lucas-Kanade optical flow, and a similarity transform
(shift, rotation, scale) is fitted with RANSAC, so moving objects, which are a minority of the
corners, do not bias it. Then:

- **still**: the fit is the identity within ``still_px``: the frame is used as it is;
- **compensated**: the fit holds (enough corners agree) and the view is within ``max_offset`` of
  the reference: the frame is warped back onto the reference (stabilised), and the strip the warp
  leaves empty is marked invalid so it cannot become foreground;
- **moved**: no fit holds, or the view has moved too far (a pan, a zoom, a cut): the frame becomes
  the new reference and the caller re-learns its background; the frames until the new background
  has settled cannot show objects reliably and are counted as lost.

Registering against a reference rather than frame to frame keeps the error from accumulating
(drift) for a camera that shakes around a fixed view. :func:`verdict` turns the counts into what the
task reports: ``camera_motion`` (none / shake / moving), ``reliable`` and the ``reason``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import cv2
import numpy as np

STILL, COMPENSATED, MOVED = "still", "compensated", "moved"
TOO_FAR = "too far"
GRID = (6, 8)  # rows, columns of cells the reference's corners are spread over


@dataclass(frozen=True)
class MotionConfig:
    width: int = 320  # registration runs on a copy this wide
    corners: int = 150
    min_corners: int = 20  # fewer corners followed than this: no fit
    # Share of the reference's corners the fit must explain: objects passing in front of some of them
    # (a bus covers a third of the view) leave enough; a cut or a pan leaves almost none.
    min_agreement: float = 0.35
    still_px: float = 0.35  # largest displacement the fit causes (at ``width``) that is no motion
    changed_share: float = 0.4  # share of the picture that must differ for an unregistrable frame to be a new view
    edge_margin: float = 0.015  # share of the width kept out of the foreground round a stabilised picture
    refresh_s: float = 2.0  # the reference view is renewed this often (objects that stood in it leave)
    max_offset: float = 0.08  # largest compensable shift, as a share of the width
    max_rotation_deg: float = 3.0
    max_scale: float = 0.04  # largest compensable zoom (|scale - 1|)
    settle_s: float = 1.0  # after a view change, frames this long only train the background
    lost_share: float = 0.05  # above this share of lost frames a result is unreliable


@dataclass(frozen=True)
class Registered:
    frame: np.ndarray  # stabilised when compensated, else the input
    state: str
    valid: np.ndarray | None = None  # 0 where a compensated frame has no pixels (None: all valid)
    offset_px: float = 0.0  # the shift undone, in frame pixels


@dataclass
class MotionStats:
    """Counts over the analysed frames of one segment; segments add up (:meth:`merge`)."""

    frames: int = 0
    still: int = 0
    compensated: int = 0
    moved: int = 0  # view changes
    lost: int = 0  # frames that could not show objects (view changes and settling after them)
    max_offset_px: float = 0.0  # largest compensated shift, in frame pixels
    cuts: list[int] = field(default_factory=list)  # frames where a new view began

    def add(self, index: int, registered: Registered, lost: bool) -> None:
        self.frames += 1
        self.lost += lost
        if registered.state == MOVED:
            self.moved += 1
            self.cuts.append(index)
        elif registered.state == COMPENSATED:
            self.compensated += 1
            self.max_offset_px = max(self.max_offset_px, registered.offset_px)
        else:
            self.still += 1

    def merge(self, other: MotionStats) -> MotionStats:
        return MotionStats(self.frames + other.frames, self.still + other.still,
                           self.compensated + other.compensated, self.moved + other.moved, self.lost + other.lost,
                           max(self.max_offset_px, other.max_offset_px), sorted(self.cuts + other.cuts))


@dataclass
class Stabilizer:
    """Registers each frame against the current reference view; see the module docstring."""

    config: MotionConfig = field(default_factory=MotionConfig)
    fps: float = 25.0
    _reference: np.ndarray | None = None
    _corners: np.ndarray | None = None
    _scale: float = 1.0
    _age: int = 0

    def register(self, frame: np.ndarray) -> Registered:
        """Register ``frame``; every ``refresh_s`` a registered frame (stabilised: in the reference's
        coordinates) becomes the reference, so corners on objects that have since left are dropped."""
        registered = self._register(frame)
        self._age += 1
        if registered.state != MOVED and self._age >= self.config.refresh_s * self.fps:
            self._reset(self._small(registered.frame))
        return registered

    def _register(self, frame: np.ndarray) -> Registered:
        small = self._small(frame)
        if self._reference is None or self._corners is None or len(self._corners) < self.config.min_corners:
            # First frame, or a view too plain to register on (night, a blank wall): taken as fixed, and
            # the detector's own jolt check (phase correlation) still catches a knock.
            self._reset(small)
            return Registered(frame, STILL)
        fit = self._fit(small)
        if fit is None or fit == TOO_FAR:
            if fit is None and not self._view_changed(small):
                return Registered(frame, STILL)
            self._reset(small)
            return Registered(frame, MOVED)
        matrix, largest = fit
        if largest <= self.config.still_px:
            return Registered(frame, STILL)
        height, width = frame.shape[:2]
        full = matrix.copy()
        full[:, 2] /= self._scale  # the shift in frame pixels
        warped = cv2.warpAffine(frame, full, (width, height), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
        valid = cv2.warpAffine(np.full((height, width), 255, np.uint8), full, (width, height), flags=cv2.INTER_NEAREST)
        # The edges of a stabilised picture are where a warp that is only nearly right (the camera also
        # tilted in depth) leaves slivers of background: they stay out of the foreground while it shakes.
        margin = 2 * round(self.config.edge_margin * width) + 1
        valid = cv2.erode(valid, np.ones((margin, margin), np.uint8), borderType=cv2.BORDER_CONSTANT, borderValue=0)
        return Registered(warped, COMPENSATED, valid, float(np.hypot(full[0, 2], full[1, 2])))

    def _small(self, frame: np.ndarray) -> np.ndarray:
        self._scale = min(1.0, self.config.width / frame.shape[1])
        size = (round(frame.shape[1] * self._scale), round(frame.shape[0] * self._scale))
        grey = cv2.cvtColor(frame, cv2.COLOR_BGR2GRAY) if frame.ndim == 3 else frame
        small = cv2.resize(grey, size, interpolation=cv2.INTER_AREA) if self._scale < 1 else grey
        return cv2.GaussianBlur(small, (5, 5), 0)  # sensor noise makes corners that cannot be followed

    def _view_changed(self, small: np.ndarray) -> bool:
        """No fit held: is it another view (most of the picture differs, light level aside), or a plain
        view that a few objects crossed (then the camera is taken as still)?"""
        assert self._reference is not None
        ref, now = self._reference.astype(np.float32), small.astype(np.float32)
        ref /= max(1.0, float(ref.mean()))
        now /= max(1.0, float(now.mean()))
        return float(np.mean(np.abs(ref - now) > 0.12)) > self.config.changed_share

    def _reset(self, small: np.ndarray) -> None:
        """New reference view; its corners are picked cell by cell over a grid, so a vehicle's strong
        corners cannot crowd out the background's weaker ones (the fit would follow the vehicle)."""
        self._age = 0
        self._reference = small
        rows, cols = GRID
        height, width = small.shape
        per_cell = max(1, self.config.corners // (rows * cols))
        found = []
        for r in range(rows):
            for c in range(cols):
                y0, y1 = r * height // rows, (r + 1) * height // rows
                x0, x1 = c * width // cols, (c + 1) * width // cols
                cell = cv2.goodFeaturesToTrack(small[y0:y1, x0:x1], per_cell, 0.01, 5, blockSize=7)
                if cell is not None:
                    found.append(cell + np.float32([x0, y0]))
        self._corners = np.concatenate(found) if found else None

    def _fit(self, small: np.ndarray) -> tuple[np.ndarray, float] | str | None:
        """The transform taking this frame onto the reference and the largest displacement it causes;
        TOO_FAR when it holds but the view has moved beyond compensation; None when no transform
        holds (another view, or a plain one that objects crossed: :meth:`_view_changed` tells)."""
        assert self._reference is not None and self._corners is not None
        moved, status, _ = cv2.calcOpticalFlowPyrLK(self._reference, small, self._corners, None,
                                                    winSize=(15, 15), maxLevel=2)
        ok = status.ravel() == 1
        if ok.sum() < self.config.min_corners:
            return None
        src, dst = moved[ok].reshape(-1, 2), self._corners[ok].reshape(-1, 2)
        unmoved = np.hypot(*(src - dst).T) <= 2 * self.config.still_px
        if unmoved.sum() >= self.config.min_agreement * len(self._corners):
            return np.float32([[1, 0, 0], [0, 1, 0]]), 0.0  # the background stayed: objects moved, not the camera
        matrix, inliers = cv2.estimateAffinePartial2D(src, dst, method=cv2.RANSAC, ransacReprojThreshold=1.0)
        if matrix is None or inliers is None or inliers.sum() < self.config.min_agreement * len(self._corners):
            return None
        scale = float(np.hypot(matrix[0, 0], matrix[1, 0]))
        rotation = float(np.degrees(np.arctan2(matrix[1, 0], matrix[0, 0])))
        shift = float(np.hypot(matrix[0, 2], matrix[1, 2]))
        if (shift > self.config.max_offset * small.shape[1] or abs(scale - 1) > self.config.max_scale
                or abs(rotation) > self.config.max_rotation_deg):
            return TOO_FAR
        height, width = small.shape
        frame_corners = np.float32([[0, 0, 1], [width, 0, 1], [0, height, 1], [width, height, 1]])
        largest = float(np.max(np.hypot(*(frame_corners @ matrix.T - frame_corners[:, :2]).T)))
        return matrix, largest


@dataclass(frozen=True)
class Verdict:
    camera_motion: str  # none | shake | moving
    reliable: bool
    reason: str

    def as_dict(self) -> dict[str, object]:
        return {"camera_motion": self.camera_motion, "reliable": self.reliable, "reason": self.reason}


def verdict(stats: MotionStats, fps: float, config: MotionConfig | None = None) -> Verdict:
    """What a task says about the camera: fixed, shaking (compensated) or moving (objects lost)."""
    config = config or MotionConfig()
    frames = max(1, stats.frames)
    lost = stats.lost / frames
    if stats.moved:
        motion = "moving"
        reason = (f"the camera moved (pan, zoom or cut) {stats.moved} time(s): {lost:.0%} of the video "
                  f"({stats.lost / fps:.1f} s) could not be analysed for objects")
    elif stats.compensated > 0.05 * frames:
        motion = "shake"
        reason = (f"camera shake compensated on {stats.compensated / frames:.0%} of the frames "
                  f"(up to {stats.max_offset_px:.0f} px)")
    else:
        motion, reason = "none", "fixed camera"
    reliable = lost <= config.lost_share
    if motion == "moving" and reliable:
        reason += "; few enough frames lost for the result to hold"
    elif not reliable:
        reason += "; the result is unreliable: objects may be missing or cut into pieces"
    return Verdict(motion, reliable, reason)
