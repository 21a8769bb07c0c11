"""A checkpoint camera's view: a vehicle approaching on the road, seen from the gantry, its plate in front.

Everything that does not change per capture is drawn once and cached: the road (per size and variant) and each
vehicle body (per type, colour and size, as an RGBA cut-out). A capture is then a copy of the road, one paste of a
body, a few strokes for the people inside, and the plate: cheap enough for hundreds of captures a second.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from PIL import Image, ImageDraw

from . import plates

BODY_COLORS: dict[str, tuple[int, int, int]] = {
    "white": (232, 232, 228), "black": (28, 28, 32), "silver": (188, 190, 195), "grey": (118, 120, 125),
    "red": (168, 28, 32), "blue": (32, 62, 150), "brown": (108, 70, 42), "green": (32, 108, 62),
    "yellow": (228, 188, 32),
}


@dataclass(frozen=True)
class Shape:
    """A vehicle type's front view, as shares of the image: width, height, where the windscreen starts and ends."""

    width: float
    height: float
    glass_top: float
    glass_bottom: float
    roof_taper: float


SHAPES: dict[str, Shape] = {
    "car": Shape(0.44, 0.50, 0.10, 0.42, 0.14),
    "suv": Shape(0.47, 0.58, 0.08, 0.40, 0.10),
    "mpv": Shape(0.48, 0.62, 0.06, 0.42, 0.07),
    "van": Shape(0.48, 0.66, 0.05, 0.40, 0.05),
    "truck": Shape(0.54, 0.78, 0.05, 0.38, 0.03),
    "bus": Shape(0.60, 0.86, 0.04, 0.48, 0.02),
}
PLATE_SHARE = 0.24
"""A 440 mm plate spans this share of the image width (a gantry camera framed on one lane)."""
ROAD_VARIANTS = 4


def plate_scale(width: int) -> float:
    """Pixels per millimetre of the plate in an image ``width`` pixels wide."""
    return width * PLATE_SHARE / plates.SEVEN.width


def _shade(color: tuple[int, int, int], factor: float) -> tuple[int, int, int]:
    return tuple(max(0, min(255, round(c * factor))) for c in color)  # type: ignore[return-value]


@lru_cache(maxsize=32)
def road(width: int, height: int, variant: int) -> Image.Image:
    """The empty road: textured asphalt, lane lines toward the horizon, a verge and trees at the top."""
    rng = np.random.default_rng(variant)
    base = 92 + 8 * variant
    noise = rng.normal(0, 9, (height, width, 1))
    shade = np.linspace(0.85, 1.05, height)[:, None, None]
    tint = np.array([0, 1, 4])  # asphalt is a little blue
    image = Image.fromarray(np.clip((base + noise) * shade + tint, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(image)
    horizon = round(height * 0.12)
    draw.rectangle((0, 0, width, horizon), fill=(70 + 10 * variant, 105, 70))
    for n in range(12):
        x = (n * 97 + variant * 41) % width
        draw.ellipse((x - width * 0.05, -height * 0.05, x + width * 0.05, horizon + height * 0.02),
                     fill=(40, 80 + 5 * (n % 4), 45))
    # Lane lines seen from a gantry that looks down the road: they converge a little toward the top of the frame.
    middle = width * (0.5 + 0.03 * (variant - 1.5))
    for lane in (-1.5, -0.5, 0.5, 1.5):
        foot, head = width * 0.5 + lane * width * 0.62, middle + lane * width * 0.36
        dashed = abs(lane) < 1
        steps = 7 if dashed else 1
        for k in range(steps):
            a, b = (k / steps, (k + 0.6) / steps) if dashed else (0.0, 1.0)
            y0, y1 = horizon + (height - horizon) * a, horizon + (height - horizon) * b
            x0, x1 = head + (foot - head) * a, head + (foot - head) * b
            draw.line((x0, y0, x1, y1), fill=(225, 225, 215), width=max(1, round(width * 0.008 * (0.6 + a))))
    return image


@lru_cache(maxsize=256)
def body(vehicle_type: str, color: str, width: int, height: int) -> Image.Image:
    """A vehicle's front as an RGBA cut-out: body, windscreen, lights, grille, mirrors, wheels."""
    shape = SHAPES.get(vehicle_type, SHAPES["car"])
    paint = BODY_COLORS.get(color, BODY_COLORS["silver"])
    w, h = round(width * shape.width), round(height * shape.height)
    image = Image.new("RGBA", (w, h), (0, 0, 0, 0))
    draw = ImageDraw.Draw(image)
    taper = w * shape.roof_taper
    glass_top, glass_bottom = h * shape.glass_top, h * shape.glass_bottom
    draw.rounded_rectangle((w * 0.03, h * 0.86, w * 0.17, h), radius=w * 0.02, fill=(18, 18, 18, 255))
    draw.rounded_rectangle((w * 0.83, h * 0.86, w * 0.97, h), radius=w * 0.02, fill=(18, 18, 18, 255))
    draw.polygon([(taper, 0), (w - taper, 0), (w * 0.97, glass_bottom), (w, h * 0.93), (0, h * 0.93),
                  (w * 0.03, glass_bottom)], fill=(*paint, 255))
    glass = [(taper + w * 0.03, glass_top), (w - taper - w * 0.03, glass_top), (w * 0.93, glass_bottom),
             (w * 0.07, glass_bottom)]
    draw.polygon(glass, fill=(38, 48, 60, 255))
    draw.polygon([glass[0], (glass[0][0] + w * 0.18, glass_top), (w * 0.30, glass_bottom), glass[3]],
                 fill=(70, 84, 100, 255))
    draw.rectangle((w * 0.03, glass_bottom, w * 0.97, glass_bottom + h * 0.02), fill=(*_shade(paint, 0.8), 255))
    lamp_top, lamp_bottom = glass_bottom + h * 0.10, glass_bottom + h * 0.20
    for left in (0.06, 0.76):
        draw.rounded_rectangle((w * left, lamp_top, w * (left + 0.18), lamp_bottom), radius=w * 0.02,
                               fill=(235, 235, 225, 255), outline=(90, 90, 90, 255))
    draw.rounded_rectangle((w * 0.30, lamp_top, w * 0.70, lamp_bottom + h * 0.03), radius=w * 0.02,
                           fill=(30, 30, 34, 255))
    for k in range(1, 4):
        y = lamp_top + (lamp_bottom + h * 0.03 - lamp_top) * k / 4
        draw.line((w * 0.31, y, w * 0.69, y), fill=(70, 70, 74, 255), width=max(1, round(h * 0.006)))
    draw.rectangle((w * 0.04, h * 0.80, w * 0.96, h * 0.93), fill=(*_shade(paint, 0.7), 255))
    mirror = max(2, round(w * 0.06))
    draw.rectangle((0, glass_bottom - mirror, mirror, glass_bottom), fill=(*_shade(paint, 0.75), 255))
    draw.rectangle((w - mirror, glass_bottom - mirror, w, glass_bottom), fill=(*_shade(paint, 0.75), 255))
    return image


@dataclass(frozen=True)
class Placement:
    """Where this capture's vehicle and plate are in the image (pixel boxes)."""

    body: tuple[int, int, int, int]
    plate: tuple[int, int, int, int]


def place(vehicle_type: str, plate_color: str, width: int, height: int, rng: random.Random) -> Placement:
    """The vehicle's box (a lane position drawn from ``rng``) and its plate's box, low in the middle of its front."""
    shape = SHAPES.get(vehicle_type, SHAPES["car"])
    w, h = round(width * shape.width), round(height * shape.height)
    left = round((width - w) / 2 + rng.uniform(-0.08, 0.08) * width)
    top = height - h - round(rng.uniform(0.01, 0.05) * height)
    pw, ph = plates.plate_size(plate_color, plate_scale(width))
    px, py = left + (w - pw) // 2, top + round(h * 0.80) - ph // 2
    return Placement((left, top, left + w, top + h), (px, py, px + pw, py + ph))


def people(image: Image.Image, where: Placement, vehicle_type: str, record: dict[str, object]) -> None:
    """The driver and passenger behind the windscreen, belted or not, and the stickers and tissue box the
    recogniser reported: the image agrees with the record's attributes."""
    shape = SHAPES.get(vehicle_type, SHAPES["car"])
    left, top, right, bottom = where.body
    w, h = right - left, bottom - top
    draw = ImageDraw.Draw(image)
    glass_top, glass_bottom = top + h * shape.glass_top, top + h * shape.glass_bottom
    head = (glass_bottom - glass_top) * 0.22
    for share, belt in ((0.70, record.get("driver_seatbelt")), (0.30, record.get("passenger_seatbelt"))):
        cx, cy = left + w * share, glass_top + (glass_bottom - glass_top) * 0.45
        draw.ellipse((cx - head, cy - head, cx + head, cy + head), fill=(150, 120, 100))
        draw.rectangle((cx - head * 1.8, cy + head, cx + head * 1.8, glass_bottom), fill=(50, 55, 70))
        if belt is True:
            draw.line((cx + head * 1.5, cy + head * 1.1, cx - head * 1.3, glass_bottom), fill=(15, 15, 15),
                      width=max(2, round(head * 0.35)))
    sticker = max(2, round(w * 0.03))
    count = record.get("inspection_sticker")
    for n in range(count if isinstance(count, int) else 0):
        x = left + w * 0.62 - n * (sticker + 2)
        draw.rectangle((x, glass_top + 3, x + sticker, glass_top + 3 + sticker), fill=(60, 150, 210))
    if record.get("tissue_box") is True:
        draw.rectangle((left + w * 0.45, glass_bottom - h * 0.05, left + w * 0.55, glass_bottom - 1),
                       fill=(235, 225, 200))
