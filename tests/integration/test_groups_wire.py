"""Every version of every group API, on the wire: encodings, version-specific fields and error codes.

Clients each pick one version; this sweeps them all with a raw client (kio codecs) so that a version
no client we test happens to use still decodes, answers in its own shape, and gets Kafka's errors.
"""

from __future__ import annotations

import dataclasses
import datetime
import sys
from typing import Any

import pytest
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from testkit.raw_kafka import RawKafka, metadata_request

FIND_COORDINATOR, JOIN, HEARTBEAT, LEAVE, SYNC = 10, 11, 12, 13, 14
OFFSET_COMMIT, OFFSET_FETCH, DESCRIBE, LIST, DELETE, OFFSET_DELETE = 8, 9, 15, 16, 42, 47
MS = datetime.timedelta(milliseconds=1)


def req(api_key: int, version: int, class_name: str | None = None, **values: Any) -> Any:
    """A request (or one of its nested structs) of this version, given the fields it has."""
    cls = load_request_schema(api_key, version)
    target = getattr(sys.modules[cls.__module__], class_name) if class_name else cls
    names = {f.name for f in dataclasses.fields(target)}
    return target(**{k: v for k, v in values.items() if k in names})


@pytest.fixture
def raw(shared_broker):  # type: ignore[no-untyped-def]
    with RawKafka(shared_broker.bootstrap) as client:
        yield client


@pytest.fixture(scope="module")
def topic(shared_broker) -> str:  # type: ignore[no-untyped-def]
    with RawKafka(shared_broker.bootstrap) as client:
        client.request(metadata_request("wire-topic"))
    return "wire-topic"


@pytest.mark.parametrize("version", range(7))
def test_find_coordinator(raw: RawKafka, shared_broker, version: int) -> None:  # type: ignore[no-untyped-def]
    if version < 4:
        response = raw.request(req(FIND_COORDINATOR, version, key="some-group", key_type=0))
        assert (response.error_code, response.node_id, response.port) == (ErrorCode.none, 1, shared_broker.port)
        if version >= 1:
            bad = raw.request(req(FIND_COORDINATOR, version, key="x", key_type=7))
            assert bad.error_code == ErrorCode.invalid_request and bad.node_id == -1
        return
    response = raw.request(req(FIND_COORDINATOR, version, key_type=0, coordinator_keys=("a", "b")))
    assert [(c.key, c.error_code, c.port) for c in response.coordinators] == [
        ("a", ErrorCode.none, shared_broker.port), ("b", ErrorCode.none, shared_broker.port)]
    txn = raw.request(req(FIND_COORDINATOR, version, key_type=1, coordinator_keys=("tx",)))
    assert txn.coordinators[0].error_code == ErrorCode.none


def join_request(version: int, group: str, member_id: str = "", session_ms: int = 6000,
                 protocol: str = "range", instance: str | None = None) -> Any:
    protocols = (req(JOIN, version, "JoinGroupRequestProtocol", name=protocol, metadata=b"meta-" + protocol.encode()),)
    return req(JOIN, version, group_id=group, session_timeout=session_ms * MS, rebalance_timeout=5000 * MS,
               member_id=member_id, group_instance_id=instance, protocol_type="consumer", protocols=protocols,
               reason=None)


@pytest.mark.parametrize("version", range(10))
def test_join_sync_heartbeat_leave(raw: RawKafka, version: int) -> None:
    group = f"wire-join-{version}"
    assert raw.request(join_request(version, group, session_ms=10)).error_code == ErrorCode.invalid_session_timeout
    assert raw.request(join_request(version, "")).error_code == ErrorCode.invalid_group_id
    joined = raw.request(join_request(version, group))
    if version >= 4:  # KIP-394: a dynamic member first gets an id to join with
        assert joined.error_code == ErrorCode.member_id_required and joined.member_id
        joined = raw.request(join_request(version, group, joined.member_id))
    assert joined.error_code == ErrorCode.none
    member = joined.member_id
    assert (joined.generation_id, joined.leader, joined.protocol_name) == (1, member, "range")
    assert [(m.member_id, m.metadata) for m in joined.members] == [(member, b"meta-range")]
    other = raw.request(join_request(version, group, protocol="roundrobin"))
    assert other.error_code == ErrorCode.inconsistent_group_protocol
    assert raw.request(join_request(version, group, "ghost")).error_code == ErrorCode.unknown_member_id

    sync_version = min(version, 5)
    assignment = (req(SYNC, sync_version, "SyncGroupRequestAssignment", member_id=member, assignment=b"parts"),)
    synced = raw.request(req(SYNC, sync_version, group_id=group, generation_id=1, member_id=member,
                             group_instance_id=None, protocol_type="consumer", protocol_name="range",
                             assignments=assignment))
    assert (synced.error_code, synced.assignment) == (ErrorCode.none, b"parts")
    wrong = raw.request(req(SYNC, sync_version, group_id=group, generation_id=7, member_id=member, assignments=()))
    assert wrong.error_code == ErrorCode.illegal_generation

    hb_version = min(version, 4)
    beat = raw.request(req(HEARTBEAT, hb_version, group_id=group, generation_id=1, member_id=member))
    assert beat.error_code == ErrorCode.none
    stale = raw.request(req(HEARTBEAT, hb_version, group_id=group, generation_id=0, member_id=member))
    assert stale.error_code == ErrorCode.illegal_generation

    leave_version = min(version, 5)
    if leave_version < 3:
        left = raw.request(req(LEAVE, leave_version, group_id=group, member_id=member))
        assert left.error_code == ErrorCode.none
        again = raw.request(req(LEAVE, leave_version, group_id=group, member_id=member))
        assert again.error_code == ErrorCode.unknown_member_id
    else:
        identities = tuple(req(LEAVE, leave_version, "MemberIdentity", member_id=m, group_instance_id=None,
                               reason=None) for m in (member, "ghost"))
        left = raw.request(req(LEAVE, leave_version, group_id=group, members=identities))
        assert left.error_code == ErrorCode.none
        assert [(m.member_id, m.error_code) for m in left.members] == [
            (member, ErrorCode.none), ("ghost", ErrorCode.unknown_member_id)]


def test_static_member_fencing_on_the_wire(raw: RawKafka) -> None:
    group = "wire-static"
    first = raw.request(join_request(5, group, instance="inst"))
    assert first.error_code == ErrorCode.none  # static members need no MEMBER_ID_REQUIRED round trip
    raw.request(req(SYNC, 3, group_id=group, generation_id=1, member_id=first.member_id, group_instance_id="inst",
                    assignments=(req(SYNC, 3, "SyncGroupRequestAssignment", member_id=first.member_id,
                                     assignment=b"a"),)))
    second = raw.request(join_request(5, group, instance="inst"))
    assert second.error_code == ErrorCode.none and second.generation_id == 1
    assert second.member_id != first.member_id
    fenced = raw.request(req(HEARTBEAT, 3, group_id=group, generation_id=1, member_id=first.member_id,
                             group_instance_id="inst"))
    assert fenced.error_code == ErrorCode.fenced_instance_id
    # an admin may remove a static member by instance id alone
    leave = raw.request(req(LEAVE, 4, group_id=group, members=(
        req(LEAVE, 4, "MemberIdentity", member_id="", group_instance_id="inst"),)))
    assert [m.error_code for m in leave.members] == [ErrorCode.none]


def commit_request(version: int, group: str, topic: str, offset: int, *, generation: int = -1,
                   partition: int = 0, metadata: str | None = "md") -> Any:
    partitions = (req(OFFSET_COMMIT, version, "OffsetCommitRequestPartition", partition_index=partition,
                      committed_offset=offset, committed_leader_epoch=3, committed_metadata=metadata),)
    topics = (req(OFFSET_COMMIT, version, "OffsetCommitRequestTopic", name=topic, partitions=partitions),)
    return req(OFFSET_COMMIT, version, group_id=group, generation_id_or_member_epoch=generation, member_id="",
               group_instance_id=None, retention_time=-1 * MS, topics=topics)


def fetch_request(version: int, group: str, topic: str | None) -> Any:
    if version >= 8:
        topics = None if topic is None else (req(OFFSET_FETCH, version, "OffsetFetchRequestTopics", name=topic,
                                                 partition_indexes=(0, 1)),)
        groups = (req(OFFSET_FETCH, version, "OffsetFetchRequestGroup", group_id=group, member_id=None,
                      member_epoch=-1, topics=topics),)
        return req(OFFSET_FETCH, version, groups=groups, require_stable=True)
    topics = None if topic is None else (req(OFFSET_FETCH, version, "OffsetFetchRequestTopic", name=topic,
                                             partition_indexes=(0, 1)),)
    return req(OFFSET_FETCH, version, group_id=group, topics=topics, require_stable=False)


@pytest.mark.parametrize("version", range(2, 10))
def test_offset_commit_versions(raw: RawKafka, topic: str, version: int) -> None:
    group = f"wire-commit-{version}"
    response = raw.request(commit_request(version, group, topic, 40 + version))
    assert [p.error_code for t in response.topics for p in t.partitions] == [ErrorCode.none]
    unknown = raw.request(commit_request(version, group, "no-such-topic", 1))
    assert unknown.topics[0].partitions[0].error_code == ErrorCode.unknown_topic_or_partition
    too_big = raw.request(commit_request(version, group, topic, 1, metadata="x" * 5000))
    assert too_big.topics[0].partitions[0].error_code == ErrorCode.offset_metadata_too_large
    missing = raw.request(commit_request(version, f"{group}-missing", topic, 1, generation=3))
    expected = ErrorCode.group_id_not_found if version >= 9 else ErrorCode.illegal_generation
    assert missing.topics[0].partitions[0].error_code == expected
    fetched = raw.request(fetch_request(7, group, topic))
    [partition0, partition1] = fetched.topics[0].partitions
    leader_epoch = 3 if version >= 6 else -1
    assert (partition0.committed_offset, partition0.committed_leader_epoch, partition0.metadata) == (
        40 + version, leader_epoch, "md")
    assert (partition1.committed_offset, partition1.metadata) == (-1, "")


@pytest.mark.parametrize("version", range(1, 10))
def test_offset_fetch_versions(raw: RawKafka, topic: str, version: int) -> None:
    group = "wire-fetch"
    raw.request(commit_request(9, group, topic, 17))
    response = raw.request(fetch_request(version, group, topic))
    topics = response.groups[0].topics if version >= 8 else response.topics
    assert [(p.partition_index, p.committed_offset) for p in topics[0].partitions] == [(0, 17), (1, -1)]
    if version >= 2:  # null topics: every committed offset of the group
        everything = raw.request(fetch_request(version, group, None))
        topics = everything.groups[0].topics if version >= 8 else everything.topics
        assert [(t.name, [p.committed_offset for p in t.partitions]) for t in topics] == [(topic, [17])]


@pytest.mark.parametrize("version", range(6))
def test_list_and_describe_versions(raw: RawKafka, version: int) -> None:
    group = f"wire-list-{version}"
    joined = raw.request(join_request(3, group))
    listed = raw.request(req(LIST, version, states_filter=("PreparingRebalance", "completingrebalance"),
                             types_filter=("classic",)))
    entry = next(g for g in listed.groups if g.group_id == group)
    assert entry.protocol_type == "consumer"
    if version >= 4:
        assert entry.group_state == "CompletingRebalance"
        stable_only = raw.request(req(LIST, version, states_filter=("Stable",)))
        assert group not in {g.group_id for g in stable_only.groups}
    if version >= 5:
        assert entry.group_type == "classic"
        assert raw.request(req(LIST, version, types_filter=("consumer",))).groups == ()
    described = raw.request(req(DESCRIBE, version, groups=(group, "wire-nobody"), include_authorized_operations=True))
    mine, nobody = described.groups
    assert (mine.group_state, mine.protocol_type, mine.protocol_data) == ("CompletingRebalance", "consumer", "")
    assert [m.member_id for m in mine.members] == [joined.member_id]
    assert mine.members[0].client_id == "raw-test" and mine.members[0].client_host == "/127.0.0.1"
    assert (nobody.error_code, nobody.group_state, nobody.members) == (ErrorCode.none, "Dead", ())


@pytest.mark.parametrize("version", range(3))
def test_delete_groups_versions(raw: RawKafka, topic: str, version: int) -> None:
    group = f"wire-delete-{version}"
    raw.request(commit_request(9, group, topic, 5))
    active = f"wire-delete-active-{version}"
    raw.request(join_request(3, active))
    response = raw.request(req(DELETE, version, groups_names=(group, active, "wire-never")))
    assert [(r.group_id, r.error_code) for r in response.results] == [
        (group, ErrorCode.none), (active, ErrorCode.non_empty_group), ("wire-never", ErrorCode.group_id_not_found)]
    fetched = raw.request(fetch_request(7, group, topic))
    assert fetched.topics[0].partitions[0].committed_offset == -1


def test_offset_delete(raw: RawKafka, topic: str) -> None:
    group = "wire-offset-delete"
    raw.request(commit_request(9, group, topic, 5))

    def delete(*topics: str) -> Any:
        entries = tuple(req(OFFSET_DELETE, 0, "OffsetDeleteRequestTopic", name=t, partitions=(
            req(OFFSET_DELETE, 0, "OffsetDeleteRequestPartition", partition_index=0),)) for t in topics)
        return raw.request(req(OFFSET_DELETE, 0, group_id=group, topics=entries))

    response = delete(topic, "no-such-topic")
    assert response.error_code == ErrorCode.none
    assert [(t.name, t.partitions[0].error_code) for t in response.topics] == [
        (topic, ErrorCode.none), ("no-such-topic", ErrorCode.unknown_topic_or_partition)]
    assert raw.request(fetch_request(7, group, topic)).topics[0].partitions[0].committed_offset == -1
    missing = raw.request(req(OFFSET_DELETE, 0, group_id="wire-none", topics=()))
    assert missing.error_code == ErrorCode.group_id_not_found
