"""A capture's JPEG, a pure function of the simulator's seed and the record (same seed -> same bytes).

Randomness per image comes from ``Random(f"{seed}/{record_id}")``, never from the traffic's generator: rendering
happens in upload threads in whatever order they run, and must not shift the record stream. Capture time is not
drawn, so a run replayed from its seed gives the same images whatever the wall clock says.

Camera states (:data:`CAMERA_STATES`) are the device faults of :mod:`ingest.traffic` as they show in images: a
blurred lens blurs the picture; a device with an image fault sends a black frame, a truncated JPEG, or no image.
"""

from __future__ import annotations

import io
import random
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from PIL import Image, ImageDraw

from contracts.records import UNRECOGNIZED, Kind

from .. import values
from . import faces, plates, vehicles

CAMERA_STATES = ("ok", "blurred", "missing", "truncated", "black")
"""``Emitted.camera``: a healthy device, a blurred lens, or one of ``traffic.IMAGE_FAULT_MODES``."""
UNREADABLE_PLATES = ("blur", "mud", "glare")
"""How a plate the recogniser could not read looks: motion blur, mud over the characters, headlight glare."""


@dataclass(frozen=True)
class ImageSettings:
    """``[simulator]`` image keys: whether to make images, their size and JPEG quality."""

    enabled: bool = True
    width: int = 640
    height: int = 360
    quality: int = 70

    def __post_init__(self) -> None:
        if not (64 <= self.width <= 4096 and 64 <= self.height <= 4096):
            raise ValueError(f"image size {self.width}x{self.height}: each side must be 64..4096 pixels")
        if not 1 <= self.quality <= 95:
            raise ValueError(f"image quality {self.quality}: must be 1..95 (Pillow's useful JPEG range)")


class Renderer:
    """Renders capture images of one run (``seed``) at one size and quality; thread-safe (caches are read-only
    once filled, and a race fills them with equal values)."""

    def __init__(self, seed: int, settings: ImageSettings) -> None:
        self.seed = seed
        self.settings = settings

    def rng(self, record: Mapping[str, Any]) -> random.Random:
        return random.Random(f"{self.seed}/{record['record_id']}")

    def image(self, kind: Kind, record: Mapping[str, Any]) -> Image.Image:
        """The picture (before faults and encoding)."""
        if kind is Kind.FACE:
            return faces.face(dict(record), self.settings.height, self.rng(record))
        return self.vehicle(record)[0]

    def vehicle(self, record: Mapping[str, Any]) -> tuple[Image.Image, vehicles.Placement]:
        """A vehicle capture's picture and where its vehicle and plate are (what a test reads the plate from)."""
        rng = self.rng(record)
        width, height = self.settings.width, self.settings.height
        vehicle_type = _known(record, "vehicle_type", rng, tuple(vehicles.SHAPES))
        color = _known(record, "vehicle_color", rng, tuple(vehicles.BODY_COLORS))
        plate_color = _known(record, "plate_color", rng, tuple(plates.SCHEMES))
        image = vehicles.road(width, height, rng.randrange(vehicles.ROAD_VARIANTS)).copy()
        where = vehicles.place(vehicle_type, plate_color, width, height, rng)
        draw = ImageDraw.Draw(image)
        left, top, right, bottom = where.body
        draw.ellipse((left - 0.03 * width, bottom - 0.04 * height, right + 0.03 * width, bottom + 0.03 * height),
                     fill=(45, 45, 48))
        cut = vehicles.body(vehicle_type, color, width, height)
        image.paste(cut, (left, top), cut)
        vehicles.people(image, where, vehicle_type, dict(record))
        text = str(record.get("plate_number", UNRECOGNIZED))
        readable = text != UNRECOGNIZED
        if not readable:
            text = values.plate(rng, plate_color)
        plate = plates.draw_plate(text, plate_color, vehicles.plate_scale(width))
        image.paste(plate, where.plate[:2])
        if not readable:
            _spoil_plate(image, where.plate, rng)
        return image, where

    def jpeg(self, kind: Kind, record: Mapping[str, Any], camera: str = "ok") -> bytes | None:
        """The bytes the device uploads in camera state ``camera``; None when it sends no image."""
        if camera == "missing":
            return None
        if camera == "black":
            return _black(*self.size(kind), self.settings.quality)
        image = self.image(kind, record)
        if camera == "blurred":
            image = _defocus(image)
        data = encode(image, self.settings.quality)
        if camera == "truncated":
            return data[: len(data) * self.rng(record).randint(30, 70) // 100]
        return data

    def size(self, kind: Kind) -> tuple[int, int]:
        """The pixel size of ``kind``'s images: the configured size, or the portrait face crop."""
        if kind is Kind.FACE:
            return faces.crop_size(self.settings.height)
        return self.settings.width, self.settings.height


def encode(image: Image.Image, quality: int) -> bytes:
    out = io.BytesIO()
    image.save(out, "JPEG", quality=quality)
    return out.getvalue()


@lru_cache(maxsize=8)
def _black(width: int, height: int, quality: int) -> bytes:
    """A dead sensor's frame: decodable, but all black."""
    return encode(Image.new("RGB", (width, height)), quality)


def _defocus(image: Image.Image, factor: int = 8) -> Image.Image:
    """A lens out of focus: down and up again, ~20x cheaper than a box blur of the same reach."""
    small = image.resize((max(1, image.width // factor), max(1, image.height // factor)), Image.Resampling.BOX)
    return small.resize(image.size, Image.Resampling.BILINEAR)


def _known(record: Mapping[str, Any], name: str, rng: random.Random, choices: tuple[str, ...]) -> str:
    """The record's value, or one drawn from ``rng`` for a field the recogniser could not read."""
    value = record.get(name, UNRECOGNIZED)
    return rng.choice(choices) if value == UNRECOGNIZED or value not in choices else str(value)


def _spoil_plate(image: Image.Image, box: tuple[int, int, int, int], rng: random.Random) -> None:
    """Make the plate unreadable the way real plates are: blurred, muddy or in glare."""
    how = rng.choice(UNREADABLE_PLATES)
    left, top, right, bottom = box
    w, h = right - left, bottom - top
    if how == "blur":
        region = image.crop(box)
        small = region.resize((max(1, w // 10), max(1, h // 6)), Image.Resampling.BILINEAR)
        image.paste(small.resize((w, h), Image.Resampling.BILINEAR), box[:2])
        return
    if how == "mud":  # splashes on the plate itself, most of its characters covered
        plate = image.crop(box)
        draw = ImageDraw.Draw(plate)
        for _ in range(7):
            x, y = rng.uniform(w * 0.1, w * 0.9), rng.uniform(0, h)
            rx, ry = w * rng.uniform(0.10, 0.22), h * rng.uniform(0.35, 0.6)
            draw.ellipse((x - rx, y - ry, x + rx, y + ry), fill=(88 + rng.randrange(20), 66, 40))
        image.paste(plate, box[:2])
    else:
        draw = ImageDraw.Draw(image)
        for k in range(5, 0, -1):
            level = 255 - 8 * k
            draw.ellipse((left + w * (0.05 - 0.02 * k), top - h * 0.1 * k, right - w * (0.05 - 0.02 * k),
                          bottom + h * 0.1 * k), fill=(level, level, level - 10))
