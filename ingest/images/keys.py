"""Where a capture's image lives in the object store, derived from its record alone.

Layout: ``captures/<kind>/<YYYY>/<MM>/<DD>/<checkpoint>/<record_id>.jpg`` (bucket ``captures``), the date being the
record's ``capture_time`` as the device stamped it (city time). A day of one checkpoint is one prefix listing, and
retention can expire by date prefix like the capture tables. The checkpoint id's ``#`` separators
(``330102#1#0#0``) become ``-`` (``330102-1-0-0``): a ``#`` in an ``s3://`` URL starts a fragment, so every URL
parser (the console's, ``video.storage.parse_s3_url``) would cut the key there.
"""

from __future__ import annotations

from contracts.records import IMAGES_BUCKET as BUCKET
from contracts.records import Kind, parse_time

IMAGES_OFF = "images_off"
"""``image_error`` of every record of a simulator run without images (``--no-images``, or no key for the store): the
record names no image rather than one that was never written."""


def object_key(kind: Kind, checkpoint_id: str, record_id: str, capture_time: str) -> str:
    """The image's key inside the ``captures`` bucket."""
    day = parse_time(capture_time)
    checkpoint = checkpoint_id.replace("#", "-")
    return f"{kind.value}/{day:%Y/%m/%d}/{checkpoint}/{record_id}.jpg"


def url(key: str) -> str:
    """The ``s3://captures/<key>`` URL a record's ``image_url`` carries."""
    return f"s3://{BUCKET}/{key}"


def key_of(image_url: str) -> str:
    """Inverse of :func:`url`; ValueError for a URL outside the captures bucket."""
    prefix = f"s3://{BUCKET}/"
    if not image_url.startswith(prefix) or len(image_url) == len(prefix):
        raise ValueError(f"not an image in the {BUCKET} bucket: {image_url!r}")
    return image_url[len(prefix):]
