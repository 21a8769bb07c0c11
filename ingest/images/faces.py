"""A face camera's crop: head and shoulders, drawn to agree with what the recogniser reported.

Gender shows in the hair, the age range in the head's size and the hair's colour, and glasses, sunglasses, a mask
or a hat are drawn when the record says so; a field the recogniser could not read (``UNRECOGNIZED``) is drawn as
whatever ``rng`` picks, as the person did have some. The crop is portrait, 3:4 of the configured height.
"""

from __future__ import annotations

import random
from functools import lru_cache

import numpy as np
from PIL import Image, ImageDraw

from contracts.records import UNRECOGNIZED

from .. import values

SKIN = ((241, 204, 170), (224, 180, 140), (198, 150, 110), (160, 112, 80))
HAIR = ((25, 20, 18), (60, 40, 25), (95, 70, 45))
GREY_HAIR = (185, 185, 182)
CLOTHES = ((40, 50, 90), (120, 30, 35), (60, 60, 60), (200, 200, 195), (40, 90, 60), (150, 110, 60))


def crop_size(height: int) -> tuple[int, int]:
    return round(height * 3 / 4), height


@lru_cache(maxsize=16)
def wall(width: int, height: int, variant: int) -> Image.Image:
    """A plain, slightly noisy background (a station's or a street's wall), one per variant and size."""
    rng = np.random.default_rng(100 + variant)
    base = np.array((150 + 20 * (variant % 3), 150 + 10 * variant, 140 + 15 * (variant % 2)))
    pixels = np.clip(base + rng.normal(0, 6, (height, width, 1)), 0, 255).astype(np.uint8)
    return Image.fromarray(pixels)


def _attribute(record: dict[str, object], name: str, rng: random.Random, choices: tuple[object, ...]) -> object:
    value = record.get(name, UNRECOGNIZED)
    return rng.choice(choices) if value == UNRECOGNIZED else value


def face(record: dict[str, object], height: int, rng: random.Random) -> Image.Image:
    """The face crop for a face record (``height`` pixels tall)."""
    width, height = crop_size(height)
    gender = _attribute(record, "gender", rng, values.GENDERS)
    age = _attribute(record, "age_range", rng, tuple(a for a, _ in values.AGE_RANGES))
    glasses = _attribute(record, "glasses", rng, tuple(g for g, _ in values.GLASSES))
    mask = _attribute(record, "mask", rng, (False, True))
    hat = _attribute(record, "hat", rng, (False, True))
    image = wall(width, height, rng.randrange(4)).copy()
    draw = ImageDraw.Draw(image)
    skin = rng.choice(SKIN)
    hair = GREY_HAIR if age == "60+" else rng.choice(HAIR)
    size = 0.80 if age == "0-17" else 1.0
    cx, cy = width / 2 + rng.uniform(-0.04, 0.04) * width, height * 0.42
    rx, ry = width * 0.25 * size, height * 0.25 * size
    draw.ellipse((width * 0.05, height * 0.78, width * 0.95, height * 1.3), fill=rng.choice(CLOTHES))
    draw.rectangle((cx - rx * 0.35, cy + ry * 0.7, cx + rx * 0.35, height * 0.85), fill=skin)
    if gender == "female":
        draw.rounded_rectangle((cx - rx * 1.25, cy - ry * 1.1, cx + rx * 1.25, cy + ry * 1.45), radius=rx * 0.6,
                               fill=hair)
    draw.ellipse((cx - rx, cy - ry, cx + rx, cy + ry), fill=skin)
    draw.chord((cx - rx * 1.04, cy - ry * 1.12, cx + rx * 1.04, cy + ry * (0.2 if gender == "female" else -0.1)),
               180, 360, fill=hair)
    if age in ("46-60", "60+"):
        for k in range(2):
            y = cy - ry * (0.45 - 0.1 * k)
            draw.arc((cx - rx * 0.5, y, cx + rx * 0.5, y + ry * 0.2), 200, 340, fill=_darker(skin), width=2)
    eye_y, eye_dx, eye_r = cy - ry * 0.08, rx * 0.42, rx * 0.12
    for side in (-1, 1):
        ex = cx + side * eye_dx
        draw.line((ex - eye_r * 1.4, eye_y - eye_r * 2, ex + eye_r * 1.4, eye_y - eye_r * 2.3), fill=hair,
                  width=max(2, round(eye_r * 0.5)))
        draw.ellipse((ex - eye_r, eye_y - eye_r * 0.6, ex + eye_r, eye_y + eye_r * 0.6), fill=(245, 245, 240))
        draw.ellipse((ex - eye_r * 0.5, eye_y - eye_r * 0.5, ex + eye_r * 0.5, eye_y + eye_r * 0.5), fill=(40, 30, 25))
        if glasses == "sunglasses":
            draw.ellipse((ex - eye_r * 2, eye_y - eye_r * 1.5, ex + eye_r * 2, eye_y + eye_r * 1.6), fill=(15, 15, 20))
        elif glasses == "glasses":
            draw.ellipse((ex - eye_r * 2, eye_y - eye_r * 1.5, ex + eye_r * 2, eye_y + eye_r * 1.6),
                         outline=(30, 30, 30), width=max(2, round(eye_r * 0.3)))
    if glasses != "none":
        draw.line((cx - eye_dx + eye_r * 2, eye_y, cx + eye_dx - eye_r * 2, eye_y), fill=(30, 30, 30), width=2)
    draw.line((cx, cy, cx - rx * 0.08, cy + ry * 0.3), fill=_darker(skin), width=2)
    if mask is True:
        draw.rounded_rectangle((cx - rx * 0.8, cy + ry * 0.1, cx + rx * 0.8, cy + ry * 0.85), radius=rx * 0.2,
                               fill=(170, 205, 230))
        for side in (-1, 1):
            draw.line((cx + side * rx * 0.8, cy + ry * 0.2, cx + side * rx, cy - ry * 0.05), fill=(220, 230, 235),
                      width=2)
    else:
        draw.arc((cx - rx * 0.35, cy + ry * 0.35, cx + rx * 0.35, cy + ry * 0.6), 20, 160, fill=(150, 60, 60),
                 width=max(2, round(ry * 0.04)))
    if hat is True:
        color = rng.choice(CLOTHES)
        draw.chord((cx - rx * 1.1, cy - ry * 1.3, cx + rx * 1.1, cy - ry * 0.2), 180, 360, fill=color)
        draw.rectangle((cx - rx * 1.1, cy - ry * 0.75, cx + rx * 1.5, cy - ry * 0.62), fill=color)
    return image


def _darker(color: tuple[int, int, int]) -> tuple[int, int, int]:
    return tuple(round(c * 0.75) for c in color)  # type: ignore[return-value]
