"""The capture record contracts (docs/architecture.md "Record schemas"), in one place.

The simulator builds records from these field lists and the ingest job validates what it reads
with the same code, so a schema change is one edit and both sides agree on what "valid" means.
Validation sorts every raw record into exactly one of three outcomes, which is what the pipeline's
counts are built on (rejected + valid = produced):

* ``VALID``: well-formed and fully recognised -> the main tables;
* ``UNRECOGNIZED``: well-formed, but the recogniser could not read some field (识别异常) ->
  counted and kept out of the main tables (quality monitoring);
* ``INVALID``: not a record at all (bad JSON, missing or mistyped fields) -> the dead-letter topic
  with the reason.
"""

from __future__ import annotations

import base64
import enum
import json
import math
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

UNRECOGNIZED = "UNRECOGNIZED"
"""What a recogniser writes into a field it could not read (识别异常)."""

CITY_TZ = timezone(timedelta(hours=8))
"""Devices and the ingest job stamp local time (UTC+8) with its offset, as the book's records do."""

FEATURE_DIM = 128
"""Face embedding length: 128 little-endian float32, L2-normalised, base64 encoded."""

_IPV4 = re.compile(r"(?:0|[1-9]\d{0,2})(?:\.(?:0|[1-9]\d{0,2})){3}")
_CHECKPOINT_ID = re.compile(r"\d{6}#\d+#\d+#\d+")
# Province abbreviation + city letter + 5 (blue/yellow) or 6 (green, new energy) characters.
_PLATE = re.compile(r"[\u4e00-\u9fff][A-Z][A-Z0-9]{5,6}[\u4e00-\u9fff]?")
IMAGES_BUCKET = "captures"
# An object in the captures bucket: a relative key without blanks, control characters, "#" or "?" (they would end
# the key in a URL) or backslashes, and no "." or ".." segment (a key that climbs out of its folder).
_IMAGE_URL = re.compile(rf"s3://{IMAGES_BUCKET}/(?!\.{{1,2}}(?:/|$))(?!.*/\.{{1,2}}(?:/|$))[^\s#?\\/][^\s#?\\]*")
IMAGE_ERROR = "image_error"
"""The field that says why a record has no image (``image_url`` empty): the device sent none, or its upload failed
for good. A record never names an image that does not exist, and never lacks one without saying why."""


class Kind(enum.Enum):
    """The two capture record kinds; the value is the main table's name (topics: :mod:`contracts.topics`)."""

    VEHICLE = "vehicle"
    FACE = "face"


def _check_str(value: Any) -> bool:
    return isinstance(value, str) and value != ""


def _check_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_number(value: Any) -> bool:
    # An int is finite whatever its size (math.isfinite would raise OverflowError on one beyond a float's range).
    return _check_int(value) or (isinstance(value, float) and math.isfinite(value))


def _check_bool(value: Any) -> bool:
    return isinstance(value, bool)


def _check_ip(value: Any) -> bool:
    # A regex pre-check first: ipaddress alone costs ~7 us per call, a noticeable share of ingest CPU.
    return isinstance(value, str) and _IPV4.fullmatch(value) is not None and all(
        int(part) <= 255 for part in value.split("."))


def is_checkpoint_id(value: Any) -> bool:
    """``district#crossroad#direction#index`` (e.g. ``110110#1#0#0``): what search inputs are checked against."""
    return isinstance(value, str) and _CHECKPOINT_ID.fullmatch(value) is not None


def _check_time(value: Any) -> bool:
    try:
        parse_time(value)
    except (ValueError, TypeError):
        return False
    return True


def is_plate(value: Any) -> bool:
    """A mainland plate (province character, city letter, 5 or 6 characters): e.g. ``浙AWL999``."""
    return isinstance(value, str) and _PLATE.fullmatch(value) is not None


def is_image_url(value: Any) -> bool:
    """An image in the captures bucket (``s3://captures/<key>``), or ``""`` for a capture without one (then the
    record's :data:`IMAGE_ERROR` says why). A URL naming another bucket or another store is not a capture image."""
    return isinstance(value, str) and (value == "" or _IMAGE_URL.fullmatch(value) is not None)


def _check_feature(value: Any) -> bool:
    try:
        vector = decode_feature(value)
    except (ValueError, TypeError):
        return False
    return abs(math.fsum(x * x for x in vector) - 1.0) < 1e-3


@dataclass(frozen=True)
class Field:
    """One record field: its check, and whether a recogniser may leave it ``UNRECOGNIZED``."""

    name: str
    check: Any
    recognized: bool = False


_COMMON_HEAD = (
    Field("record_id", _check_str),
    Field("checkpoint_id", is_checkpoint_id),
    Field("device_ip", _check_ip),
    Field("recognizer_ip", _check_ip),
    Field("capture_time", _check_time),
)

FIELDS: dict[Kind, tuple[Field, ...]] = {
    Kind.VEHICLE: (
        *_COMMON_HEAD,
        Field("plate_number", is_plate, recognized=True),
        Field("plate_color", _check_str, recognized=True),
        Field("vehicle_color", _check_str, recognized=True),
        Field("vehicle_type", _check_str, recognized=True),
        Field("vehicle_brand", _check_str, recognized=True),
        Field("vehicle_series", _check_str, recognized=True),
        Field("inspection_sticker", _check_int, recognized=True),
        Field("tissue_box", _check_bool, recognized=True),
        Field("driver_seatbelt", _check_bool, recognized=True),
        Field("passenger_seatbelt", _check_bool, recognized=True),
        Field("lane", _check_int),
        Field("speed_kmh", _check_number),
        Field("image_url", is_image_url),
    ),
    Kind.FACE: (
        *_COMMON_HEAD,
        Field("gender", _check_str, recognized=True),
        Field("age_range", _check_str, recognized=True),
        Field("glasses", _check_str, recognized=True),
        Field("mask", _check_bool, recognized=True),
        Field("hat", _check_bool, recognized=True),
        Field("feature", _check_feature, recognized=True),
        Field("image_url", is_image_url),
    ),
}

RECOGNIZED_FIELDS: dict[Kind, tuple[str, ...]] = {
    kind: tuple(f.name for f in fields if f.recognized) for kind, fields in FIELDS.items()
}
"""Per kind, the fields a recogniser fills in and may therefore leave ``UNRECOGNIZED``."""


class Status(enum.Enum):
    VALID = "valid"
    UNRECOGNIZED = "unrecognized"
    INVALID = "invalid"


@dataclass(frozen=True)
class Checked:
    """The outcome of validating one raw record; ``record`` is None only when INVALID."""

    status: Status
    record: dict[str, Any] | None = None
    reason: str = ""
    unrecognized: tuple[str, ...] = ()


def validate(kind: Kind, record: Mapping[str, Any]) -> Checked:
    """Check a decoded record against its schema; unknown extra fields are allowed (forward compatible)."""
    unreadable = []
    for field in FIELDS[kind]:
        if field.name not in record:
            return Checked(Status.INVALID, reason=f"missing field {field.name}")
        value = record[field.name]
        if field.recognized and value == UNRECOGNIZED:
            unreadable.append(field.name)
        elif not field.check(value):
            return Checked(Status.INVALID, reason=f"bad {field.name}: {str(value)[:60]!r}")
    if record["image_url"] == "" and not _check_str(record.get(IMAGE_ERROR)):
        return Checked(Status.INVALID, reason=f"no image_url and no {IMAGE_ERROR} saying why")
    record = dict(record)
    if unreadable:
        return Checked(Status.UNRECOGNIZED, record, f"unrecognized {','.join(unreadable)}", tuple(unreadable))
    return Checked(Status.VALID, record)


def parse(kind: Kind, raw: bytes | None) -> Checked:
    """Decode a raw bus value (UTF-8 JSON object) and validate it."""
    if raw is None:
        return Checked(Status.INVALID, reason="null value")
    try:
        record = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # bad UTF-8 or JSON, an int over Python's digit limit, deep nesting
        return Checked(Status.INVALID, reason=f"not JSON: {exc}")
    if not isinstance(record, dict):
        return Checked(Status.INVALID, reason=f"not a JSON object: {type(record).__name__}")
    return validate(kind, record)


def encode(record: Mapping[str, Any]) -> bytes:
    """The wire form: compact UTF-8 JSON (plates and other text stay readable, not \\u-escaped)."""
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode()


def format_time(moment: datetime) -> str:
    """ISO-8601 with milliseconds and an explicit offset, e.g. ``2026-11-22T08:01:02.345+08:00``."""
    if moment.tzinfo is None:
        raise ValueError("capture times carry an offset: pass an aware datetime")
    return moment.isoformat(timespec="milliseconds")


def parse_time(text: str) -> datetime:
    """Inverse of :func:`format_time`; refuses times without an offset (they are ambiguous)."""
    if not isinstance(text, str):
        raise TypeError("time must be a string")
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        raise ValueError(f"time without offset: {text!r}")
    return moment


def epoch_ms(text: str) -> int:
    """Milliseconds since the epoch of an ISO-8601 time (what row keys and latencies use)."""
    return round(parse_time(text).timestamp() * 1000)


def now_time() -> str:
    return format_time(datetime.now(CITY_TZ))


def encode_feature(vector: list[float]) -> str:
    if len(vector) != FEATURE_DIM:
        raise ValueError(f"a face feature has {FEATURE_DIM} components, not {len(vector)}")
    return base64.b64encode(struct.pack(f"<{FEATURE_DIM}f", *vector)).decode()


def decode_feature(text: str) -> tuple[float, ...]:
    raw = base64.b64decode(text, validate=True)
    if len(raw) != 4 * FEATURE_DIM:
        raise ValueError(f"a face feature is {4 * FEATURE_DIM} bytes, not {len(raw)}")
    return struct.unpack(f"<{FEATURE_DIM}f", raw)
