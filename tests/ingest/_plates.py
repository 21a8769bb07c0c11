"""Reading a plate back from a capture image by template matching against the renderer's own glyphs.

Not an OCR engine: each character cell of the plate (where :mod:`ingest.images.plates` puts it) is compared with
every character a plate can carry, rendered fresh, and the best correlation wins. A legible plate reads back as its
text; a blurred, muddy or glared one does not, and its best matches are poor.
"""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

from ingest import values
from ingest.images import plates

PROVINCE_CHARS = "".join(p for p, _ in values.PROVINCES)


def decode(data: bytes) -> Image.Image:
    image = Image.open(io.BytesIO(data))
    image.load()
    return image.convert("RGB")


def _correlation(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a - a.mean(), b - b.mean()
    norm = float(np.sqrt((a * a).sum() * (b * b).sum()))
    return float((a * b).sum() / norm) if norm else 0.0


def read_plate(image: Image.Image, box: tuple[int, int, int, int], color: str, scale: float) -> tuple[str, float]:
    """The text on the plate at ``box`` and the weakest cell's best correlation (1.0: a perfect match)."""
    crop = np.asarray(image.crop(box).convert("L"), dtype=np.float64)
    text, weakest = [], 1.0
    cells = plates.cell_boxes(plates.layout_for(color), scale)
    for n, (left, top, right, bottom) in enumerate(cells):
        cell = crop[top:bottom, left:right]
        candidates = PROVINCE_CHARS if n == 0 else values.PLATE_ALPHABET
        scores = {c: abs(_correlation(cell, np.asarray(plates.glyph(c, right - left, bottom - top), np.float64)))
                  for c in candidates}
        best = max(scores, key=scores.__getitem__)
        text.append(best)
        weakest = min(weakest, scores[best])
    return "".join(text), weakest


def plate_difference(image: Image.Image, box: tuple[int, int, int, int], text: str, color: str,
                     scale: float) -> float:
    """Mean absolute difference (0..255) between the plate in ``image`` and a fresh rendering of ``text``."""
    fresh = np.asarray(plates.draw_plate(text, color, scale), dtype=np.float64)
    seen = np.asarray(image.crop(box), dtype=np.float64)
    return float(np.abs(fresh - seen).mean())
