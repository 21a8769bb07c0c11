"""What one capture image looks like to an operator: ``ok``, ``missing``, ``undecodable`` or ``black`` (issue 28).

The faults a device shows in its images (``ingest.images.render``) are a truncated JPEG, a black frame, or no
image at all, and the ingest job cannot see any of them: it reads records, never images. So the monitor decodes
a sample of images itself. An image is judged by decoding it *whole* (``Image.load``), since Pillow's ``open``
reads only the header and a JPEG cut in half still opens; a truncated file then raises, because
``ImageFile.LOAD_TRUNCATED_IMAGES`` is left off. Luminance is measured on a greyscale copy, which a dead sensor's
frame (all zero, plus JPEG noise of a level or two) cannot pass.
"""

from __future__ import annotations

import io
import warnings

from PIL import Image, ImageStat

OK, MISSING, UNDECODABLE, BLACK = "ok", "missing", "undecodable", "black"
RESULTS = (OK, MISSING, UNDECODABLE, BLACK)
BAD = frozenset((MISSING, UNDECODABLE, BLACK))
MAX_PIXELS = 50_000_000
"""More pixels than any capture camera makes: such a file is a decompression bomb, not an image (undecodable)."""


def judge(data: bytes | None, black_luminance: float) -> str:
    """The result for an image's bytes (None: the object does not exist)."""
    if data is None:
        return MISSING
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data)) as image:
                if image.format != "JPEG" or image.width * image.height > MAX_PIXELS:
                    return UNDECODABLE
                image.load()
                grey = image.convert("L")
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError, Image.DecompressionBombWarning):
        # OSError: not an image / truncated / broken data stream; SyntaxError and ValueError: malformed headers
        return UNDECODABLE
    return BLACK if ImageStat.Stat(grey).mean[0] < black_luminance else OK
