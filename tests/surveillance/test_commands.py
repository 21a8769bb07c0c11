"""The command contract (contracts/surveillance.py): what is accepted, and the field each refusal names."""

from __future__ import annotations

import base64
import math
import random
import struct

import pytest

from contracts.records import encode, encode_feature
from contracts.surveillance import (
    CommandError,
    StatCommand,
    cloned_hit_id,
    hit_record,
    parse_hit,
    parse_stat,
    parse_watch,
    reply_record,
    stat_from_json,
    watch_from_json,
    watch_hit_id,
)
from ingest import values


def test_plate_watch_round_trips_through_its_wire_form() -> None:
    watch = watch_from_json({"watch_id": "w-1", "kind": "plate", "plate": "浙A12345", "districts": ["330102"],
                             "checkpoints": ["330102#1#0#0"], "expires_at": "2030-01-01T00:00:00.000+08:00",
                             "reason": "stolen", "requested_by": "op", "requested_at": "2026-01-01T00:00:00+08:00"})
    assert parse_watch(b"w-1", encode(watch.to_json())) == watch
    assert watch.expires_ms == 1893427200000 and watch.active(1893427199999) and not watch.active(1893427200000)
    assert watch.in_scope("330102#9#0#0", "330102") and watch.in_scope("330102#1#0#0", None)
    assert not watch.in_scope("330106#1#0#0", "330106")
    unscoped = watch_from_json({"watch_id": "w-2", "kind": "plate", "plate": "浙A12345"})
    assert unscoped.in_scope("330106#1#0#0", "330106") and unscoped.active(10**15)


def test_face_watch_normalises_its_embedding_and_keeps_the_threshold() -> None:
    vector = [2.0 * x for x in values.unit_vector(random.Random(1))]
    watch = watch_from_json({"watch_id": "f", "kind": "face", "feature": encode_feature(vector), "threshold": 0.9})
    assert watch.threshold == 0.9 and watch.feature is not None
    stored = struct.unpack("<128f", watch.feature)
    assert math.isclose(math.fsum(x * x for x in stored), 1.0, rel_tol=1e-5)
    assert parse_watch(b"f", encode(watch.to_json())) == watch
    assert watch_from_json({"watch_id": "g", "kind": "face", "feature": encode_feature(vector)}).threshold == 0.8


@pytest.mark.parametrize(("value", "field", "reason"), [
    ({"watch_id": "x", "kind": "boat"}, "kind", "unknown kind"),
    ({"watch_id": "x", "kind": "plate"}, "plate", "missing"),
    ({"watch_id": "x", "kind": "plate", "plate": "ABC"}, "plate", "not a plate"),
    ({"watch_id": "x", "kind": "face", "feature": "%%%"}, "feature", "bad base64"),
    ({"watch_id": "x", "kind": "face", "feature": base64.b64encode(b"\0" * 508).decode()}, "feature",
     "wrong embedding length"),
    ({"watch_id": "x", "kind": "face", "feature": base64.b64encode(b"\0" * 512).decode()}, "feature", "all zeros"),
    ({"watch_id": "x", "kind": "face", "feature": encode_feature([math.nan] * 128)}, "feature", "NaN"),
    ({"watch_id": "x", "kind": "face", "feature": encode_feature([1.0] * 128), "threshold": 0}, "threshold", ""),
    ({"watch_id": "x", "kind": "face", "feature": encode_feature([1.0] * 128), "threshold": 1.01}, "threshold", ""),
    ({"watch_id": "x", "kind": "face", "feature": encode_feature([1.0] * 128), "threshold": True}, "threshold", ""),
    ({"watch_id": "x", "kind": "plate", "plate": "浙A12345", "expires_at": "2030-01-01"}, "expires_at", "offset"),
    ({"watch_id": "x", "kind": "plate", "plate": "浙A12345", "districts": "330102"}, "districts", "list"),
    ({"watch_id": "x", "kind": "plate", "plate": "浙A12345", "checkpoints": ["nowhere"]}, "checkpoints", "not a"),
    ({"kind": "plate", "plate": "浙A12345"}, "watch_id", "missing"),
    ({"watch_id": "a b", "kind": "plate", "plate": "浙A12345"}, "watch_id", "letters"),
])
def test_bad_watch_commands_name_the_field(value: dict, field: str, reason: str) -> None:
    with pytest.raises(CommandError) as caught:
        watch_from_json(value)
    assert caught.value.field == field and reason in caught.value.reason


def test_the_key_must_agree_and_a_null_value_is_a_tombstone() -> None:
    with pytest.raises(CommandError, match="differs from the record key"):
        parse_watch(b"other", encode({"watch_id": "x", "kind": "plate", "plate": "浙A12345"}))
    assert parse_watch(b"x", None) is None and parse_stat(b"s", None) is None
    for raw in (b"[1, 2]", b"\xff", b"{"):
        with pytest.raises(CommandError) as caught:
            parse_watch(b"x", raw)
        assert caught.value.field == "value"


def test_stat_commands() -> None:
    stat = stat_from_json({"stat_id": "s1", "measure": "avg_speed", "group_by": "district", "window_s": 60,
                           "filter": {"vehicle_type": "suv"}})
    assert isinstance(stat, StatCommand) and stat.kind.value == "vehicle"
    assert stat.matches({"vehicle_type": "suv"}) and not stat.matches({"vehicle_type": "car"})
    assert parse_stat(b"s1", encode(stat.to_json())) == stat
    for value, field in [({"measure": "mood"}, "measure"), ({"group_by": "street"}, "group_by"),
                         ({"window_s": 0}, "window_s"), ({"window_s": 86_401}, "window_s"),
                         ({"window_s": 1.5}, "window_s"), ({"filter": {"colour": "red"}}, "filter"),
                         ({"measure": "face_count", "filter": {"vehicle_type": "suv"}}, "filter"),
                         ({"filter": {"vehicle_type": ["suv"]}}, "filter")]:
        with pytest.raises(CommandError) as caught:
            stat_from_json({"stat_id": "s", "measure": "vehicle_count", "group_by": "city", "window_s": 10, **value})
        assert caught.value.field == field


def test_hit_ids_are_deterministic_and_hits_read_back() -> None:
    assert watch_hit_id("w", "r1") == watch_hit_id("w", "r1") != watch_hit_id("w", "r2")
    assert cloned_hit_id("a", "b") == cloned_hit_id("b", "a") != watch_hit_id("a", "b")
    hit = hit_record(hit_id=watch_hit_id("w", "r"), watch_id="w", kind="plate", record_id="r",
                     checkpoint_id="330102#1#0#0", capture_time="2026-01-01T00:00:00.000+08:00", score=1,
                     location={"district": "330102", "crossroad": 1, "lat": 30.0, "lon": 120.0},
                     detected_at="2026-01-01T00:00:00.050+08:00", match="exact", plate="浙A12345", trajectory=[])
    assert parse_hit(encode(hit)) == hit
    for bad in (None, b"{}", b"[]", encode({**hit, "kind": "boat"})):
        with pytest.raises(ValueError):
            parse_hit(bad)
    with pytest.raises(ValueError):
        hit_record(**{**hit, "kind": "boat"})  # type: ignore[arg-type]
    assert reply_record("w", "watch", "rejected", "kind: x", "t", "i")["status"] == "rejected"
    with pytest.raises(ValueError):
        reply_record("w", "watch", "maybe", "", "t", "i")
