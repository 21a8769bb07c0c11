"""The surveillance contracts (docs/architecture.md "Record schemas"): watch and statistic commands, hits, replies.

Anyone may write to the control topics, so the console (before it publishes, answering 422 with the
field) and the surveillance service (before it applies, answering on ``surveillance.replies``) validate
a command with the same functions here; a bad command raises :class:`CommandError` naming the field and
the reason, never anything else. Where a statistic's filter names a checkpoint or a lane, both also check it
against the deployment map they hold (``lanes`` of :func:`stat_from_json`): a checkpoint that does not exist,
or a lane its checkpoint does not have, is refused rather than counted as an empty road. A hit's id is a hash
of what it is about (the watch and the capture, or the two sightings of a cloned plate), so a replay after a
crash produces the same ids and the loader and the console de-duplicate by it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from contracts.commands import CommandError

from .json_values import parse_object
from .records import FEATURE_DIM, FIELDS, Kind, epoch_ms, is_checkpoint_id, is_plate

WATCH_KINDS = ("plate", "face")
HIT_KINDS = ("plate", "face", "cloned_plate")
MATCHES = ("exact", "fuzzy")
MEASURES: dict[str, Kind] = {"vehicle_count": Kind.VEHICLE, "face_count": Kind.FACE,
                             "distinct_plates": Kind.VEHICLE, "avg_speed": Kind.VEHICLE}
"""Each measure and the capture kind it counts."""
GROUPINGS = ("lane", "checkpoint", "district", "city")
"""Finest first. A lane is one of a checkpoint's lanes (its group key :func:`lane_group`); only vehicle records
have a ``lane``, so a face measure cannot be grouped by lane."""
WINDOW_S_RANGE = (1, 86_400)
"""Tumbling windows from one second to one day."""
DEFAULT_THRESHOLD = 0.8
REPLY_COMMANDS = ("watch", "stat")
ACCEPTED, REJECTED, REMOVED = "accepted", "rejected", "removed"
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}")
_DISTRICT = re.compile(r"\d{6}")
_FEATURE_BYTES = 4 * FEATURE_DIM
_LANE_GROUP = re.compile(r"(\d{6}#\d+#\d+#\d+)/lane-(-?\d{1,9})")


def lane_group(checkpoint_id: str, lane: int) -> str:
    """A lane's group key, ``<checkpoint id>/lane-<n>``: lane numbers restart at 1 on every checkpoint, so the key
    names both (a checkpoint id never holds ``/``, so the key reads back unambiguously: :func:`parse_lane_group`)."""
    return f"{checkpoint_id}/lane-{lane}"


def parse_lane_group(group: str) -> tuple[str, int] | None:
    """(checkpoint id, lane) of a lane's group key; None for any other group (a checkpoint, district, city)."""
    match = _LANE_GROUP.fullmatch(group)
    return None if match is None else (match.group(1), int(match.group(2)))


@dataclass(frozen=True)
class WatchCommand:
    """A watched plate or face; ``feature`` is the L2-normalised embedding as 128 little-endian float32."""

    watch_id: str
    kind: str
    plate: str | None = None
    feature: bytes | None = None
    threshold: float = DEFAULT_THRESHOLD
    checkpoints: frozenset[str] = frozenset()
    districts: frozenset[str] = frozenset()
    expires_at: str | None = None
    expires_ms: int | None = None
    reason: str = ""
    requested_by: str = ""
    requested_at: str = ""

    def active(self, now_ms: int) -> bool:
        return self.expires_ms is None or now_ms < self.expires_ms

    def in_scope(self, checkpoint_id: str, district: str | None) -> bool:
        """No scope: the whole city; else the capture's checkpoint or its district must be listed."""
        if not self.checkpoints and not self.districts:
            return True
        return checkpoint_id in self.checkpoints or (district is not None and district in self.districts)

    def to_json(self) -> dict[str, Any]:
        """The command's value on ``control.watchlist`` (what :func:`parse_watch` reads back)."""
        value: dict[str, Any] = {"watch_id": self.watch_id, "kind": self.kind}
        if self.kind == "plate":
            value["plate"] = self.plate
        else:
            value["feature"] = base64.b64encode(self.feature or b"").decode()
            value["threshold"] = self.threshold
        if self.checkpoints:
            value["checkpoints"] = sorted(self.checkpoints)
        if self.districts:
            value["districts"] = sorted(self.districts)
        if self.expires_at is not None:
            value["expires_at"] = self.expires_at
        value.update(reason=self.reason, requested_by=self.requested_by, requested_at=self.requested_at)
        return value


@dataclass(frozen=True)
class StatCommand:
    """A live statistic: ``measure`` of the captures per ``group_by`` over tumbling ``window_s`` windows."""

    stat_id: str
    measure: str
    group_by: str
    window_s: int
    filter: tuple[tuple[str, Any], ...] = ()
    requested_by: str = ""
    requested_at: str = ""

    @property
    def kind(self) -> Kind:
        """The capture kind the statistic reads."""
        return MEASURES[self.measure]

    def matches(self, record: Mapping[str, Any]) -> bool:
        """The equality filter: every named field holds the given value."""
        return all(record.get(name) == value for name, value in self.filter)

    def to_json(self) -> dict[str, Any]:
        return {"stat_id": self.stat_id, "measure": self.measure, "group_by": self.group_by,
                "window_s": self.window_s, "filter": dict(self.filter), "requested_by": self.requested_by,
                "requested_at": self.requested_at}


def _object(raw: bytes | Mapping[str, Any]) -> Mapping[str, Any]:
    if isinstance(raw, Mapping):
        return raw
    try:
        value = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CommandError("value", f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise CommandError("value", f"not a JSON object: {type(value).__name__}")
    return value


def _text(data: Mapping[str, Any], name: str, required: bool = False) -> str:
    value = data.get(name)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value):
        raise CommandError(name, "missing" if value in (None, "") else f"should be a string, not {value!r}"[:120])
    return value


def _id(data: Mapping[str, Any], name: str, key: bytes | str | None) -> str:
    value = _text(data, name, required=True)
    if _ID.fullmatch(value) is None:
        raise CommandError(name, "letters, digits and ._:@- only, at most 128 characters")
    if key is not None:
        key_text = key.decode("utf-8", "replace") if isinstance(key, bytes) else key
        if key_text != value:
            raise CommandError(name, f"differs from the record key {key_text!r}")
    return value


def _time_ms(data: Mapping[str, Any], name: str) -> tuple[str | None, int | None]:
    value = data.get(name)
    if value is None:
        return None, None
    try:
        return value, epoch_ms(value)
    except (TypeError, ValueError) as exc:
        raise CommandError(name, f"not an ISO-8601 time with offset: {exc}") from None


def _scope(data: Mapping[str, Any], name: str, check: Any, what: str) -> frozenset[str]:
    value = data.get(name)
    if value is None:
        return frozenset()
    if not isinstance(value, list):
        raise CommandError(name, f"should be a list of {what}")
    for item in value:
        if not check(item):
            raise CommandError(name, f"not a {what}: {str(item)[:60]!r}")
    return frozenset(value)


def decode_embedding(text: Any, field: str = "feature") -> bytes:
    """Base64 of 128 float32 -> the same, L2-normalised (cosine similarity is then a dot product)."""
    if not isinstance(text, str) or not text:
        raise CommandError(field, "missing")
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise CommandError(field, "bad base64") from None
    if len(raw) != _FEATURE_BYTES:
        raise CommandError(field, f"wrong embedding length: {len(raw)} bytes, not {_FEATURE_BYTES} "
                                  f"({FEATURE_DIM} float32)")
    vector = np.frombuffer(raw, dtype="<f4").astype(np.float64)  # numpy: a service loads 10,000s of these
    if not np.isfinite(vector).all():
        raise CommandError(field, "embedding holds NaN or infinity")
    norm = float(np.linalg.norm(vector))
    if norm == 0.0:
        raise CommandError(field, "embedding is all zeros")
    return (vector / norm).astype("<f4").tobytes()


def watch_from_json(data: Mapping[str, Any], key: bytes | str | None = None) -> WatchCommand:
    """Validate a watch command's value (``key``: the record key it must agree with, when known)."""
    watch_id = _id(data, "watch_id", key)
    kind = data.get("kind")
    if kind not in WATCH_KINDS:
        raise CommandError("kind", f"unknown kind {str(kind)[:40]!r}: plate or face")
    plate, feature, threshold = None, None, DEFAULT_THRESHOLD
    if kind == "plate":
        plate = data.get("plate")
        if plate in (None, ""):
            raise CommandError("plate", "missing")
        if not is_plate(plate):
            raise CommandError("plate", f"not a plate: {str(plate)[:40]!r}")
    else:
        feature = decode_embedding(data.get("feature"))
        threshold = data.get("threshold", DEFAULT_THRESHOLD)
        if not isinstance(threshold, int | float) or isinstance(threshold, bool) or not 0 < threshold <= 1:
            raise CommandError("threshold", f"cosine similarity in (0, 1], not {threshold!r}"[:120])
        threshold = float(threshold)
    expires_at, expires_ms = _time_ms(data, "expires_at")
    return WatchCommand(
        watch_id=watch_id, kind=kind, plate=plate, feature=feature, threshold=threshold,
        checkpoints=_scope(data, "checkpoints", is_checkpoint_id, "checkpoint id"),
        districts=_scope(data, "districts", lambda d: isinstance(d, str) and _DISTRICT.fullmatch(d), "district code"),
        expires_at=expires_at, expires_ms=expires_ms, reason=_text(data, "reason"),
        requested_by=_text(data, "requested_by"), requested_at=_text(data, "requested_at"))


def stat_from_json(data: Mapping[str, Any], key: bytes | str | None = None,
                   lanes: Mapping[str, int] | None = None) -> StatCommand:
    """Validate a statistic command's value; with ``lanes`` (checkpoint id -> its lane count, from the deployment
    map) a ``checkpoint_id`` or ``lane`` filter must also name a checkpoint and a lane the map has."""
    stat_id = _id(data, "stat_id", key)
    measure = data.get("measure")
    if measure not in MEASURES:
        raise CommandError("measure", f"unknown measure {str(measure)[:40]!r}: {', '.join(MEASURES)}")
    group_by = data.get("group_by")
    if group_by not in GROUPINGS:
        raise CommandError("group_by", f"unknown group_by {str(group_by)[:40]!r}: {', '.join(GROUPINGS)}")
    window_s = data.get("window_s")
    low, high = WINDOW_S_RANGE
    if not isinstance(window_s, int) or isinstance(window_s, bool) or not low <= window_s <= high:
        raise CommandError("window_s", f"whole seconds from {low} to {high}, not {window_s!r}"[:120])
    known = {f.name for f in FIELDS[MEASURES[measure]]}
    if group_by == "lane" and "lane" not in known:
        raise CommandError("group_by", f"{MEASURES[measure].value} records have no lane: group {measure} by "
                                       f"{', '.join(g for g in GROUPINGS if g != 'lane')}")
    conditions = data.get("filter") or {}
    if not isinstance(conditions, dict):
        raise CommandError("filter", "should be an object of field: value")
    for name, value in conditions.items():
        if name not in known:
            raise CommandError("filter", f"no field {name!r} in {MEASURES[measure].value} records")
        if not isinstance(value, str | int | float | bool):
            raise CommandError("filter", f"{name}: compare with a string, number or boolean")
    _check_places(conditions, lanes)
    return StatCommand(stat_id=stat_id, measure=measure, group_by=group_by, window_s=window_s,
                       filter=tuple(sorted(conditions.items())), requested_by=_text(data, "requested_by"),
                       requested_at=_text(data, "requested_at"))


def _check_places(conditions: Mapping[str, Any], lanes: Mapping[str, int] | None) -> None:
    """A checkpoint or lane filter must name a place that can match: a filter that silently matches nothing
    would look like an idle road. Its shape is checked always (a record's ``lane`` is an integer, so ``"2"`` would
    never match); whether the place exists only against a deployment map (``lanes``: checkpoint id -> its lane
    count; None or empty when there is none to judge by)."""
    checkpoint, lane = conditions.get("checkpoint_id"), conditions.get("lane")
    if checkpoint is not None and not is_checkpoint_id(checkpoint):
        raise CommandError("filter.checkpoint_id", f"not a checkpoint id (e.g. 330102#1#0#0): {str(checkpoint)[:40]!r}")
    if lane is not None and (not isinstance(lane, int) or isinstance(lane, bool) or lane < 1):
        raise CommandError("filter.lane", f"a lane number (an integer from 1), not {str(lane)[:40]!r}")
    if not lanes:
        return
    if checkpoint is not None and checkpoint not in lanes:
        raise CommandError("filter.checkpoint_id", f"no checkpoint {checkpoint!r} on the deployment map")
    if lane is None:
        return
    if checkpoint is not None and lane > lanes[checkpoint]:
        raise CommandError("filter.lane", f"checkpoint {checkpoint} has lanes 1 to {lanes[checkpoint]}, not {lane}")
    if checkpoint is None and lane > max(lanes.values()):
        raise CommandError("filter.lane", f"no checkpoint on the deployment map has a lane {lane} "
                                          f"(at most {max(lanes.values())})")


def parse_watch(key: bytes | None, value: bytes | None) -> WatchCommand | None:
    """A ``control.watchlist`` record: None for a tombstone (the watch is removed)."""
    return None if value is None else watch_from_json(_object(value), key)


def parse_stat(key: bytes | None, value: bytes | None, lanes: Mapping[str, int] | None = None) -> StatCommand | None:
    """A ``control.stats`` record: None for a tombstone (the statistic stops); ``lanes`` as :func:`stat_from_json`."""
    return None if value is None else stat_from_json(_object(value), key, lanes)


def hit_id(*parts: str) -> str:
    """Deterministic id of what a hit is about (24 hex digits of SHA-256 over the parts)."""
    digest = hashlib.sha256("\x1f".join(parts).encode()).hexdigest()
    return digest[:24]


def watch_hit_id(watch_id: str, record_id: str) -> str:
    return hit_id("watch", watch_id, record_id)


def cloned_hit_id(record_a: str, record_b: str) -> str:
    """The same pair of sightings in either order is one hit."""
    return hit_id("cloned", *sorted((record_a, record_b)))


def hit_record(*, hit_id: str, watch_id: str | None, kind: str, record_id: str, checkpoint_id: str,
               capture_time: str, score: float, location: Mapping[str, Any], detected_at: str,
               match: str | None = None, plate: str | None = None, trajectory: list[dict[str, Any]] | None = None,
               sightings: list[dict[str, Any]] | None = None, speed_kmh: float | None = None,
               distance_km: float | None = None) -> dict[str, Any]:
    """One ``surveillance.hits`` value (key: the watch id, or the plate for an unwatched cloned plate)."""
    if kind not in HIT_KINDS:
        raise ValueError(f"hit kind must be one of {HIT_KINDS}, not {kind!r}")
    if match is not None and match not in MATCHES:
        raise ValueError(f"hit match must be one of {MATCHES}, not {match!r}")
    record: dict[str, Any] = {
        "hit_id": hit_id, "watch_id": watch_id, "kind": kind, "match": match, "record_id": record_id,
        "checkpoint_id": checkpoint_id, "capture_time": capture_time, "score": round(float(score), 4),
        "location": dict(location), "detected_at": detected_at}
    if plate is not None:
        record["plate"] = plate
    if trajectory is not None:
        record["trajectory"] = trajectory
    if sightings is not None:
        record.update(sightings=sightings, speed_kmh=speed_kmh, distance_km=distance_km)
    return record


_HIT_FIELDS = ("hit_id", "kind", "record_id", "checkpoint_id", "capture_time", "detected_at")


def parse_hit(value: bytes | None) -> dict[str, Any]:
    """Read a hit back (loader, console, trajectory rebuild); ValueError for anything not shaped like one."""
    try:
        hit = parse_object(value)
    except ValueError as exc:
        raise ValueError(f"hit: {exc}") from None
    for name in _HIT_FIELDS:
        if not isinstance(hit.get(name), str) or not hit[name]:
            raise ValueError(f"hit without {name}")
    if hit["kind"] not in HIT_KINDS:
        raise ValueError(f"unknown hit kind {hit['kind']!r}")
    return hit


def reply_record(command_id: str, command: str, status: str, reason: str, time: str, instance: str) -> dict[str, Any]:
    """One ``surveillance.replies`` value (key: the command's id): what the service did with a command."""
    if command not in REPLY_COMMANDS:
        raise ValueError(f"reply command must be one of {REPLY_COMMANDS}, not {command!r}")
    if status not in (ACCEPTED, REJECTED, REMOVED):
        raise ValueError(f"reply status must be accepted, rejected or removed, not {status!r}")
    return {"id": command_id, "command": command, "status": status, "reason": reason, "time": time,
            "instance": instance}
