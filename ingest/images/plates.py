"""Licence plates as a camera sees them: the scheme of GA 36 (layout in millimetres) at a given pixel width.

Only the text changes per capture, so the plate blanks (colour, border, separator dot) and every character's
glyph are rendered once per size and cached; a plate is a blank plus a paste per character (~50 us).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

FONT = Path("/usr/share/fonts/opentype/noto/NotoSansCJK-Bold.ttc")
FONT_INDEX = 2
"""Simplified Chinese in the Noto CJK collection (0 JP, 1 KR, 2 SC, 3 TC)."""
LATIN_CAP = 0.733
"""Cap height of Noto Sans as a share of the em: sizes the font so a letter fills its 90 mm cell."""
_FREETYPE = threading.Lock()
"""A FreeType face must not render in two threads at once; images are rendered on the upload threads."""


@dataclass(frozen=True)
class Scheme:
    """A plate colour's look: background (top and bottom, for the new-energy gradient) and character colour."""

    top: tuple[int, int, int]
    bottom: tuple[int, int, int]
    ink: tuple[int, int, int]


SCHEMES: dict[str, Scheme] = {
    "blue": Scheme((10, 70, 170), (0, 55, 150), (245, 245, 245)),
    "yellow": Scheme((250, 195, 10), (240, 180, 0), (15, 15, 15)),
    "green": Scheme((245, 250, 245), (40, 180, 90), (15, 15, 15)),
    "white": Scheme((242, 242, 238), (232, 232, 228), (15, 15, 15)),
    "black": Scheme((20, 20, 22), (10, 10, 12), (245, 245, 245)),
}


@dataclass(frozen=True)
class Layout:
    """A plate's geometry in millimetres: size, character cell, gaps (between characters; after the second)."""

    width: float
    height: float
    cell_w: float
    cell_h: float
    margin: float
    gap: float
    separator: float
    characters: int


SEVEN = Layout(440, 140, 45, 90, 15.5, 12, 34, 7)
EIGHT = Layout(480, 140, 43, 90, 15.5, 9, 51, 8)
"""New-energy (green) plates carry eight characters on a longer plate."""


def layout_for(color: str) -> Layout:
    return EIGHT if color == "green" else SEVEN


def plate_size(color: str, scale: float) -> tuple[int, int]:
    """Pixel size of a ``color`` plate at ``scale`` pixels per millimetre."""
    layout = layout_for(color)
    return round(layout.width * scale), round(layout.height * scale)


def cell_boxes(layout: Layout, scale: float) -> list[tuple[int, int, int, int]]:
    """Each character cell's pixel box (left, top, right, bottom) on the plate."""
    top = (layout.height - layout.cell_h) / 2 * scale
    boxes, x = [], layout.margin
    for n in range(layout.characters):
        boxes.append((round(x * scale), round(top), round((x + layout.cell_w) * scale),
                      round(top + layout.cell_h * scale)))
        x += layout.cell_w + (layout.separator if n == 1 else layout.gap)
    return boxes


@lru_cache(maxsize=4)
def _font(size: int) -> ImageFont.FreeTypeFont:
    return ImageFont.truetype(str(FONT), size, index=FONT_INDEX)


@lru_cache(maxsize=2048)
def glyph(char: str, width: int, height: int) -> Image.Image:
    """``char`` as an ``L`` mask stretched to its cell, as plate fonts are condensed; cached per size."""
    size = max(8, round(height / LATIN_CAP)) if char.isascii() else max(8, height)
    with _FREETYPE:  # only on a cache miss: a few hundred times a run
        font = _font(size)
        left, top, right, bottom = font.getbbox(char)
        canvas = Image.new("L", (round(right - left), round(bottom - top)), 0)
        ImageDraw.Draw(canvas).text((-left, -top), char, fill=255, font=font)
    return canvas.resize((width, height), Image.Resampling.LANCZOS)


@lru_cache(maxsize=64)
def blank(color: str, scale: float) -> Image.Image:
    """An empty plate: background (gradient for new energy), a thin inner border and the separator dot."""
    scheme = SCHEMES.get(color, SCHEMES["blue"])
    layout = layout_for(color)
    width, height = plate_size(color, scale)
    column = Image.linear_gradient("L").resize((1, height))
    plate = Image.composite(Image.new("RGB", (1, height), scheme.bottom), Image.new("RGB", (1, height), scheme.top),
                            column).resize((width, height))
    draw = ImageDraw.Draw(plate)
    inset = max(1, round(3 * scale))
    draw.rounded_rectangle((inset, inset, width - 1 - inset, height - 1 - inset), radius=max(1, round(8 * scale)),
                           outline=scheme.ink, width=max(1, round(2 * scale)))
    boxes = cell_boxes(layout, scale)
    dot_x = (boxes[1][2] + boxes[2][0]) / 2
    radius = max(1.0, 5 * scale)
    draw.ellipse((dot_x - radius, height / 2 - radius, dot_x + radius, height / 2 + radius), fill=scheme.ink)
    return plate


def draw_plate(text: str, color: str, scale: float) -> Image.Image:
    """The plate ``text`` (``浙A12345``; 8 characters on green plates) in ``color``'s scheme, ``scale`` px/mm."""
    scheme = SCHEMES.get(color, SCHEMES["blue"])
    layout = layout_for(color)
    plate = blank(color, scale).copy()
    ink = Image.new("RGB", plate.size, scheme.ink)
    for char, (left, top, right, bottom) in zip(text, cell_boxes(layout, scale), strict=False):
        mask = glyph(char, right - left, bottom - top)
        plate.paste(ink.crop((0, 0, right - left, bottom - top)), (left, top), mask)
    return plate
