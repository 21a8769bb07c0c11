"""`Shapes.make`, the version-tolerant builder every handler answers through: typos fail loudly."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from bus.protocol import messages

METADATA, JOIN_GROUP = 3, 11


def test_a_field_of_another_version_is_dropped_and_a_missing_one_gets_its_zero() -> None:
    v0 = messages.shapes(METADATA, 0).make("MetadataResponse", cluster_id="c", brokers=[])
    assert not hasattr(v0, "cluster_id")  # added in v2: dropped for v0, as the version lacks it
    v12 = messages.shapes(METADATA, 12).make("MetadataResponse", cluster_id="c")
    assert v12.cluster_id == "c" and v12.throttle_time.total_seconds() == 0


def test_a_misspelt_field_is_refused_naming_the_class_and_the_field() -> None:
    shapes = messages.shapes(JOIN_GROUP, 9)
    with pytest.raises(messages.UnknownField, match=r"JoinGroupResponse \(api 11\) has no field membr_id"):
        shapes.make("JoinGroupResponse", error_code=ErrorCode.none, membr_id="m")


def test_a_nested_class_is_checked_against_its_own_fields() -> None:
    shapes = messages.shapes(JOIN_GROUP, 0)
    member = shapes.make("JoinGroupResponseMember", member_id="m", group_instance_id=None, metadata=b"")
    assert member.member_id == "m"  # group_instance_id exists from v5: dropped here, not refused
    with pytest.raises(messages.UnknownField, match="instance_id"):
        shapes.make("JoinGroupResponseMember", member_id="m", instance_id="i")
