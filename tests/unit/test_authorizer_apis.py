"""Every API the broker serves, on its client listeners and on its controller listener, refuses a principal with no
ACLs the way Kafka does (Kafka's authorization error code, or for a listing the entries it may not see left out),
and lets a super user through. Driven at the KafkaApis level with real encoded frames and a principal, no sockets.

The table below must name every API of both handler tables: an API added without a case here fails
`test_every_served_api_has_an_authorization_case`, and one whose handler does not ask the authorizer fails its case.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import inspect
import itertools
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from bus.broker.apis import handlers
from bus.broker.broker import Broker
from bus.broker.controller_apis import handlers as controller_handlers
from bus.broker.kafka_apis import KafkaApis
from bus.config.broker import STANDARD_AUTHORIZER, load_broker_config
from bus.controller.controller import TopicSpec
from bus.controller.controller_channel import ControllerChannel, ControllerUnavailable
from bus.protocol import client_codec, messages
from bus.protocol.messages import request_shapes
from bus.protocol.records import build_batch
from bus.security.acls import (
    AclBinding,
    AclOperation,
    PatternType,
    PermissionType,
    ResourceType,
    deserialize_principal,
    serialize_principal,
)

ADMIN = "User:admin"
MALLORY = "User:mallory"
TOPIC = "orders"
GROUP = "billing"
TXN = "txn-1"

TOPIC_DENIED = ErrorCode.topic_authorization_failed
GROUP_DENIED = ErrorCode.group_authorization_failed
CLUSTER_DENIED = ErrorCode.cluster_authorization_failed
TXN_DENIED = ErrorCode.transactional_id_authorization_failed
AUTHORIZATION_ERRORS = {TOPIC_DENIED, GROUP_DENIED, CLUSTER_DENIED, TXN_DENIED}

# APIs Kafka answers without asking the authorizer, and why.
NOT_AUTHORIZED = {
    17: "SaslHandshake: how a client authenticates, so before it has a principal (Kafka authorizes none)",
    18: "ApiVersions: a client asks it before it authenticates (Kafka answers it to anyone, on every listener)",
    36: "SaslAuthenticate: how a client authenticates, so before it has a principal (Kafka authorizes none)",
}


@dataclass(frozen=True)
class Seed:
    """What the broker holds before the cases run, made by the super user."""

    topic_id: uuid.UUID
    cluster_id: str


@dataclass(frozen=True)
class Case:
    """One request and how Kafka refuses it to a principal without ACLs: `denied` is the error code somewhere in
    the response, or a predicate on the decoded response (a listing narrowed rather than refused)."""

    api_key: int
    version: int
    request: Callable[[Any, Seed], Any]  # (request shapes, seed) -> kio request
    denied: ErrorCode | Callable[[Any], bool]
    name: str = ""
    super_user: bool = True  # also sent as the super user, who must get past every check

    @property
    def id(self) -> str:
        return f"{self.api_key}-v{self.version}{'-' + self.name if self.name else ''}"


def _records(transactional: bool = False) -> bytes:
    return build_batch([(0, 0, b"k", b"v")], base_offset=0, producer_id=7 if transactional else -1,
                       producer_epoch=0 if transactional else -1, base_sequence=0 if transactional else -1,
                       is_transactional=transactional)


def _produce(transactional: bool) -> Callable[[Any, Seed], Any]:
    def build(s: Any, _seed: Seed) -> Any:
        data = s.make("PartitionProduceData", index=0, records=_records(transactional))
        return s.make("ProduceRequest", transactional_id=TXN if transactional else None, acks=1,
                      timeout=datetime.timedelta(seconds=5),
                      topic_data=(s.make("TopicProduceData", name=TOPIC, partition_data=(data,)),))
    return build


def _topic_names(response: Any) -> set[str]:
    return {t.name for t in response.topics}


CLIENT_CASES = [
    Case(0, 12, _produce(False), TOPIC_DENIED),
    Case(0, 12, _produce(True), TXN_DENIED, "transactional"),
    Case(1, 16, lambda s, seed: s.make(
        "FetchRequest", replica_state=s.make("ReplicaState", replica_id=-1, replica_epoch=-1), max_bytes=1 << 20,
        topics=(s.make("FetchTopic", topic_id=seed.topic_id, partitions=(
            s.make("FetchPartition", partition=0, fetch_offset=0, partition_max_bytes=1 << 20),)),)), TOPIC_DENIED),
    Case(1, 16, lambda s, seed: s.make(
        "FetchRequest", replica_state=s.make("ReplicaState", replica_id=2, replica_epoch=-1), max_bytes=1 << 20,
        topics=(s.make("FetchTopic", topic_id=seed.topic_id, partitions=(
            s.make("FetchPartition", partition=0, fetch_offset=0, partition_max_bytes=1 << 20),)),)), TOPIC_DENIED,
         "follower"),
    Case(2, 8, lambda s, _: s.make("ListOffsetsRequest", replica_id=-1, topics=(
        s.make("ListOffsetsTopic", name=TOPIC, partitions=(s.make("ListOffsetsPartition", timestamp=-1),)),)),
         TOPIC_DENIED),
    Case(3, 12, lambda s, _: s.make("MetadataRequest", topics=(s.make("MetadataRequestTopic", name=TOPIC),)),
         TOPIC_DENIED),
    Case(3, 12, lambda s, _: s.make("MetadataRequest", topics=None), lambda r: not r.topics, "all-topics"),
    Case(3, 12, lambda s, _: s.make("MetadataRequest", topics=(s.make("MetadataRequestTopic", name="new-one"),),
                                    allow_auto_topic_creation=True), TOPIC_DENIED, "auto-create"),
    Case(8, 9, lambda s, _: s.make("OffsetCommitRequest", group_id=GROUP, generation_id_or_member_epoch=-1, topics=(
        s.make("OffsetCommitRequestTopic", name=TOPIC, partitions=(
            s.make("OffsetCommitRequestPartition", committed_offset=1),)),)), GROUP_DENIED),
    Case(9, 9, lambda s, _: s.make("OffsetFetchRequest", groups=(
        s.make("OffsetFetchRequestGroup", group_id=GROUP, topics=None),)), GROUP_DENIED),
    Case(10, 6, lambda s, _: s.make("FindCoordinatorRequest", key_type=0, coordinator_keys=(GROUP,)), GROUP_DENIED),
    Case(10, 6, lambda s, _: s.make("FindCoordinatorRequest", key_type=1, coordinator_keys=(TXN,)), TXN_DENIED,
         "transaction"),
    Case(11, 9, lambda s, _: s.make("JoinGroupRequest", group_id=GROUP, session_timeout=datetime.timedelta(seconds=10),
                                    rebalance_timeout=datetime.timedelta(seconds=10), protocol_type="consumer",
                                    protocols=(s.make("JoinGroupRequestProtocol", name="range", metadata=b""),)),
         GROUP_DENIED),
    Case(12, 4, lambda s, _: s.make("HeartbeatRequest", group_id=GROUP, generation_id=1, member_id="m"), GROUP_DENIED),
    Case(13, 5, lambda s, _: s.make("LeaveGroupRequest", group_id=GROUP, members=(
        s.make("MemberIdentity", member_id="m"),)), GROUP_DENIED),
    Case(14, 5, lambda s, _: s.make("SyncGroupRequest", group_id=GROUP, generation_id=1, member_id="m"),
         GROUP_DENIED),
    Case(15, 5, lambda s, _: s.make("DescribeGroupsRequest", groups=(GROUP,)), GROUP_DENIED),
    Case(16, 5, lambda s, _: s.make("ListGroupsRequest"), lambda r: not r.groups),
    Case(19, 7, lambda s, _: s.make("CreateTopicsRequest", topics=(
        s.make("CreatableTopic", name="another", num_partitions=1, replication_factor=1),)), TOPIC_DENIED),
    Case(21, 2, lambda s, _: s.make("DeleteRecordsRequest", topics=(
        s.make("DeleteRecordsTopic", name=TOPIC, partitions=(s.make("DeleteRecordsPartition", offset=0),)),)),
         TOPIC_DENIED),
    Case(22, 5, lambda s, _: s.make("InitProducerIdRequest", transactional_id=None, producer_id=-1,
                                    producer_epoch=-1), CLUSTER_DENIED),
    Case(22, 5, lambda s, _: s.make("InitProducerIdRequest", transactional_id=TXN, producer_id=-1, producer_epoch=-1,
                                    transaction_timeout=datetime.timedelta(seconds=10)), TXN_DENIED, "transactional"),
    Case(23, 4, lambda s, _: s.make("OffsetForLeaderEpochRequest", replica_id=-1, topics=(
        s.make("OffsetForLeaderTopic", topic=TOPIC, partitions=(
            s.make("OffsetForLeaderPartition", current_leader_epoch=-1),)),)), TOPIC_DENIED),
    Case(24, 3, lambda s, _: s.make("AddPartitionsToTxnRequest", v3_and_below_transactional_id=TXN,
                                    v3_and_below_topics=(s.make("AddPartitionsToTxnTopic", name=TOPIC,
                                                                partitions=(0,)),)), TXN_DENIED),
    Case(25, 4, lambda s, _: s.make("AddOffsetsToTxnRequest", transactional_id=TXN, group_id=GROUP), TXN_DENIED),
    Case(26, 4, lambda s, _: s.make("EndTxnRequest", transactional_id=TXN, committed=True), TXN_DENIED),
    Case(27, 1, lambda s, _: s.make("WriteTxnMarkersRequest", markers=(
        s.make("WritableTxnMarker", producer_id=7, topics=(
            s.make("WritableTxnMarkerTopic", name=TOPIC, partition_indexes=(0,)),)),)), CLUSTER_DENIED),
    Case(28, 4, lambda s, _: s.make("TxnOffsetCommitRequest", transactional_id=TXN, group_id=GROUP, topics=(
        s.make("TxnOffsetCommitRequestTopic", name=TOPIC, partitions=(
            s.make("TxnOffsetCommitRequestPartition", committed_offset=1),)),)), TXN_DENIED),
    Case(29, 3, lambda s, _: s.make("DescribeAclsRequest", resource_type_filter=1, pattern_type_filter=1, operation=1,
                                    permission_type=1), CLUSTER_DENIED),
    Case(30, 3, lambda s, _: s.make("CreateAclsRequest", creations=(
        s.make("AclCreation", resource_type=2, resource_name="*", resource_pattern_type=3, principal=MALLORY,
               host="*", operation=2, permission_type=3),)), CLUSTER_DENIED),
    Case(31, 3, lambda s, _: s.make("DeleteAclsRequest", filters=(
        s.make("DeleteAclsFilter", resource_type_filter=1, pattern_type_filter=1, operation=1, permission_type=1),)),
         CLUSTER_DENIED),
    Case(32, 4, lambda s, _: s.make("DescribeConfigsRequest", resources=(
        s.make("DescribeConfigsResource", resource_type=2, resource_name=TOPIC),)), TOPIC_DENIED),
    Case(32, 4, lambda s, _: s.make("DescribeConfigsRequest", resources=(
        s.make("DescribeConfigsResource", resource_type=4, resource_name="1"),)), CLUSTER_DENIED, "broker"),
    Case(33, 2, lambda s, _: s.make("AlterConfigsRequest", resources=(
        s.make("AlterConfigsResource", resource_type=2, resource_name=TOPIC),)), TOPIC_DENIED),
    Case(35, 4, lambda s, _: s.make("DescribeLogDirsRequest", topics=None), CLUSTER_DENIED),
    Case(37, 3, lambda s, _: s.make("CreatePartitionsRequest", topics=(
        s.make("CreatePartitionsTopic", name=TOPIC, count=2),)), TOPIC_DENIED),
    Case(42, 2, lambda s, _: s.make("DeleteGroupsRequest", groups_names=(GROUP,)), GROUP_DENIED),
    Case(43, 2, lambda s, _: s.make("ElectLeadersRequest", topic_partitions=(
        s.make("TopicPartitions", topic=TOPIC, partitions=(0,)),)), CLUSTER_DENIED),
    Case(44, 1, lambda s, _: s.make("IncrementalAlterConfigsRequest", resources=(
        s.make("AlterConfigsResource", resource_type=4, resource_name=""),)), CLUSTER_DENIED),
    Case(45, 1, lambda s, _: s.make("AlterPartitionReassignmentsRequest", topics=()), CLUSTER_DENIED),
    Case(46, 0, lambda s, _: s.make("ListPartitionReassignmentsRequest", topics=None), CLUSTER_DENIED),
    Case(47, 0, lambda s, _: s.make("OffsetDeleteRequest", group_id=GROUP, topics=()), GROUP_DENIED),
    Case(50, 0, lambda s, _: s.make("DescribeUserScramCredentialsRequest", users=None), CLUSTER_DENIED),
    Case(51, 0, lambda s, _: s.make("AlterUserScramCredentialsRequest", deletions=(
        s.make("ScramCredentialDeletion", name="carol", mechanism=1),), upsertions=()), CLUSTER_DENIED),
    Case(55, 1, lambda s, _: s.make("DescribeQuorumRequest", topics=()), CLUSTER_DENIED),
    Case(60, 1, lambda s, _: s.make("DescribeClusterRequest", include_cluster_authorized_operations=True,
                                    endpoint_type=1), lambda r: r.cluster_authorized_operations == 0),
    Case(61, 0, lambda s, _: s.make("DescribeProducersRequest", topics=(
        s.make("TopicRequest", name=TOPIC, partition_indexes=(0,)),)), TOPIC_DENIED),
    # Not as the super user: the -1 start time Kafka answers for an Empty transaction is more than kio's reader takes.
    Case(65, 0, lambda s, _: s.make("DescribeTransactionsRequest", transactional_ids=(TXN,)), TXN_DENIED,
         super_user=False),
    Case(66, 1, lambda s, _: s.make("ListTransactionsRequest", duration_filter=-1),
         lambda r: not r.transaction_states),
    Case(68, 1, lambda s, _: s.make("ConsumerGroupHeartbeatRequest", group_id=GROUP, member_id=str(uuid.uuid4()),
                                    rebalance_timeout=datetime.timedelta(seconds=10), subscribed_topic_names=(TOPIC,),
                                    topic_partitions=()), GROUP_DENIED),
    Case(69, 1, lambda s, _: s.make("ConsumerGroupDescribeRequest", group_ids=(GROUP,)), GROUP_DENIED),
    # Last: the super user's DeleteTopics deletes the topic the cases above use. By id, a principal that may not
    # describe the topic is not told its name either.
    Case(20, 6, lambda s, seed: s.make("DeleteTopicsRequest", topics=(
        s.make("DeleteTopicState", topic_id=seed.topic_id),)), lambda r: (
        r.responses[0].error_code == TOPIC_DENIED and r.responses[0].name is None), "by-id"),
    Case(20, 6, lambda s, _: s.make("DeleteTopicsRequest", topics=(s.make("DeleteTopicState", name=TOPIC),)),
         TOPIC_DENIED),
]


def _inner_frame() -> bytes:
    request = request_shapes(19, 7).make("CreateTopicsRequest", topics=())
    return bytes(client_codec.encode_request(1, "forwarder", request, 7)[4:])


CONTROLLER_CASES = [
    Case(1, 12, lambda s, seed: s.make("FetchRequest", cluster_id=seed.cluster_id, replica_id=2, topics=()),
         CLUSTER_DENIED),
    Case(52, 0, lambda s, seed: s.make("VoteRequest", cluster_id=seed.cluster_id, topics=()), CLUSTER_DENIED),
    Case(53, 0, lambda s, seed: s.make("BeginQuorumEpochRequest", cluster_id=seed.cluster_id, topics=()),
         CLUSTER_DENIED),
    Case(54, 0, lambda s, seed: s.make("EndQuorumEpochRequest", cluster_id=seed.cluster_id, topics=()),
         CLUSTER_DENIED),
    Case(55, 1, lambda s, _: s.make("DescribeQuorumRequest", topics=()), CLUSTER_DENIED),
    Case(56, 3, lambda s, _: s.make("AlterPartitionRequest", broker_id=2, broker_epoch=-1, topics=()),
         CLUSTER_DENIED),
    Case(58, 0, lambda s, _: s.make("EnvelopeRequest", request_data=_inner_frame(),
                                    request_principal=serialize_principal(ADMIN),
                                    client_host_address=bytes([127, 0, 0, 1])), CLUSTER_DENIED),
    Case(59, 0, lambda s, seed: s.make("FetchSnapshotRequest", cluster_id=seed.cluster_id, replica_id=2, topics=()),
         CLUSTER_DENIED),
    Case(62, 1, lambda s, seed: s.make("BrokerRegistrationRequest", broker_id=2, cluster_id=seed.cluster_id,
                                       incarnation_id=uuid.uuid4(), listeners=(), features=()), CLUSTER_DENIED),
    Case(63, 1, lambda s, _: s.make("BrokerHeartbeatRequest", broker_id=2, broker_epoch=-1), CLUSTER_DENIED),
    Case(67, 0, lambda s, _: s.make("AllocateProducerIdsRequest", broker_id=2, broker_epoch=-1), CLUSTER_DENIED),
]


def error_codes(value: Any) -> Iterator[ErrorCode]:
    """Every `*error_code` field anywhere in a decoded response."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        for field in dataclasses.fields(value):
            item = getattr(value, field.name)
            if field.name.endswith("error_code"):
                yield ErrorCode(item)
            else:
                yield from error_codes(item)
    elif isinstance(value, tuple):
        for item in value:
            yield from error_codes(item)


_correlation = itertools.count(1)


async def call(apis: KafkaApis, api_key: int, version: int, request: Any, principal: str) -> Any:
    """`request` as `principal` from 127.0.0.1, through KafkaApis as a connection hands it over: the decoded answer."""
    frame = bytes(client_codec.encode_request(next(_correlation), "authz-test", request, version)[4:])
    result = apis.handle(frame, "PLAINTEXT", "127.0.0.1:50000", principal=principal)
    framed = await result if inspect.isawaitable(result) else result
    assert framed is not None
    return client_codec.decode_response(bytes(framed)[4:], api_key, version)


async def send(apis: KafkaApis, case: Case, seed: Seed, principal: str) -> Any:
    return await call(apis, case.api_key, case.version, case.request(request_shapes(case.api_key, case.version),
                                                                     seed), principal)


class Harness:
    """One in-process broker with the authorizer on, and its client and controller KafkaApis."""

    def __init__(self, tmp_path: Path) -> None:
        config = load_broker_config({
            "log.dirs": str(tmp_path / "data"), "node.id": "1", "log.cleaner.enable": "false",
            "listeners": "PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0", "group.initial.rebalance.delay.ms": "0",
            "offsets.topic.replication.factor": "1", "offsets.topic.num.partitions": "2",
            "transaction.state.log.replication.factor": "1", "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "2",
            "authorizer.class.name": STANDARD_AUTHORIZER, "super.users": ADMIN})
        self.broker = Broker(config)
        self.client = self.broker.apis
        self.controller = KafkaApis(self.broker.apis.services, controller_handlers())

    async def start(self) -> Seed:
        await self.broker.start()
        created = self.broker.controller.create_topic(TopicSpec(TOPIC, 1, 1))
        await self.broker.controller.log.sync()
        await self.broker.replicas.settled()
        assert created is not None
        seed = Seed(created.topic_id, self.broker.cluster_id)
        # Something for the listings to hide: a group with committed offsets and a transactional id.
        commit = next(case for case in CLIENT_CASES if case.api_key == 8)
        committed = await send(self.client, commit, seed, ADMIN)
        assert set(error_codes(committed)) == {ErrorCode.none}, committed
        init = request_shapes(22, 5).make("InitProducerIdRequest", transactional_id=TXN, producer_id=-1,
                                          producer_epoch=-1, transaction_timeout=datetime.timedelta(seconds=10))
        answer = await call(self.client, 22, 5, init, ADMIN)
        assert answer.error_code == ErrorCode.none, answer
        return seed

    async def stop(self) -> None:
        await self.broker.stop()


def _refused(case: Case, response: Any) -> bool:
    if isinstance(case.denied, ErrorCode):
        return case.denied in set(error_codes(response))
    return case.denied(response)


def test_every_served_api_has_an_authorization_case() -> None:
    """A new API needs a case here (or a reason Kafka does not authorize it): so it cannot ship unchecked."""
    client = {case.api_key for case in CLIENT_CASES} | set(NOT_AUTHORIZED)
    controller = {case.api_key for case in CONTROLLER_CASES} | set(NOT_AUTHORIZED)
    assert sorted(set(handlers()) - client) == []
    assert sorted(set(controller_handlers()) - controller) == []
    assert not set(NOT_AUTHORIZED) & {case.api_key for case in CLIENT_CASES + CONTROLLER_CASES}


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Any, Any]]:
    """Each case's response to MALLORY (no ACLs) and to ADMIN (a super user), from one broker."""

    async def scenario() -> dict[str, tuple[Any, Any]]:
        harness = Harness(tmp_path_factory.mktemp("authz"))
        try:
            seed = await harness.start()
            found: dict[str, tuple[Any, Any]] = {}
            for table, cases in ((harness.client, CLIENT_CASES), (harness.controller, CONTROLLER_CASES)):
                label = "client" if table is harness.client else "controller"
                for case in cases:
                    denied = await send(table, case, seed, MALLORY)
                    allowed = None
                    if table is harness.client and case.super_user:
                        allowed = await send(table, case, seed, ADMIN)
                    found[f"{label}-{case.id}"] = (denied, allowed)
            return found
        finally:
            await harness.stop()

    return asyncio.run(scenario())


@pytest.mark.parametrize("case", CLIENT_CASES, ids=[c.id for c in CLIENT_CASES])
def test_client_api_refuses_a_principal_without_acls(outcomes: dict[str, tuple[Any, Any]], case: Case) -> None:
    denied, allowed = outcomes[f"client-{case.id}"]
    assert _refused(case, denied), denied
    if not case.super_user:
        return
    # The super user gets past every check: no authorization error, and the listings show what MALLORY's hid.
    assert not AUTHORIZATION_ERRORS & set(error_codes(allowed)), allowed
    if not isinstance(case.denied, ErrorCode):
        assert not case.denied(allowed), allowed


@pytest.mark.parametrize("case", CONTROLLER_CASES, ids=[c.id for c in CONTROLLER_CASES])
def test_controller_api_refuses_a_principal_without_acls(outcomes: dict[str, tuple[Any, Any]], case: Case) -> None:
    denied, _ = outcomes[f"controller-{case.id}"]
    assert _refused(case, denied), denied



class _Channel:
    """The controller channel of the active controller, as Envelope sees it: it forwards nothing."""

    def forwards(self, _api_key: int) -> bool:
        return False  # it is the active controller


def _create_topics_frame(name: str) -> bytes:
    shapes = request_shapes(19, 7)
    request = shapes.make("CreateTopicsRequest", topics=(
        shapes.make("CreatableTopic", name=name, num_partitions=1, replication_factor=1),))
    return bytes(client_codec.encode_request(1, "client", request, 7)[4:])


def test_a_forwarded_request_is_authorized_as_the_client_that_sent_it(tmp_path: Path) -> None:
    """The active controller runs an Envelope's request as the principal and from the host the envelope carries
    (KIP-590), once the forwarding broker itself has CLUSTER_ACTION."""

    async def scenario() -> dict[str, Any]:
        harness = Harness(tmp_path)
        try:
            await harness.start()
            controller = harness.broker.controller
            controller.create_acls([AclBinding(ResourceType.TOPIC, "fwd-", PatternType.PREFIXED, MALLORY, "10.1.2.3",
                                               AclOperation.CREATE, PermissionType.ALLOW)])
            await controller.log.sync()
            services = dataclasses.replace(harness.client.services, controller_channel=_Channel(),
                                           envelope_apis=harness.client)
            apis = KafkaApis(services, controller_handlers())

            async def forwarded(sender: str, principal: bytes, host: bytes, topic: str) -> Any:
                envelope = request_shapes(58, 0).make("EnvelopeRequest", request_data=_create_topics_frame(topic),
                                                      request_principal=principal, client_host_address=host)
                answer = await call(apis, 58, 0, envelope, sender)
                if answer.error_code != ErrorCode.none:
                    return answer.error_code
                return client_codec.decode_response(answer.response_data, 19, 7).topics[0].error_code

            client_host, elsewhere = bytes([10, 1, 2, 3]), bytes([10, 9, 9, 9])
            return {
                "mallory from its host": await forwarded(ADMIN, serialize_principal(MALLORY), client_host, "fwd-a"),
                "mallory from elsewhere": await forwarded(ADMIN, serialize_principal(MALLORY), elsewhere, "fwd-b"),
                "mallory outside its prefix": await forwarded(ADMIN, serialize_principal(MALLORY), client_host, "x"),
                "admin": await forwarded(ADMIN, serialize_principal(ADMIN), elsewhere, "fwd-c"),
                "sent by mallory": await forwarded(MALLORY, serialize_principal(ADMIN), client_host, "fwd-d"),
                "unreadable principal": await forwarded(ADMIN, b"\x00\x07", client_host, "fwd-e"),
            }
        finally:
            await harness.stop()

    assert asyncio.run(scenario()) == {
        "mallory from its host": ErrorCode.none,
        "mallory from elsewhere": TOPIC_DENIED,
        "mallory outside its prefix": TOPIC_DENIED,
        "admin": ErrorCode.none,
        "sent by mallory": CLUSTER_DENIED,  # the forwarding broker needs CLUSTER_ACTION
        "unreadable principal": ErrorCode.principal_deserialization_failure,
    }


def test_the_controller_channel_forwards_the_principal_and_the_client_address() -> None:
    """The envelope a non-active node sends names the client's principal (Kafka's DefaultPrincipalData) and address."""
    raft = SimpleNamespace(role_listeners=[])  # the channel listens for leader changes; forward needs nothing else
    channel = ControllerChannel(1, raft, None, {}, 1.0)  # type: ignore[arg-type]
    sent: list[Any] = []

    async def respond(message: Any, _version: int) -> Any:
        sent.append(message)
        return messages.shapes(58, 0).make("EnvelopeResponse", response_data=b"\x00\x00\x00\x01",
                                           error_code=ErrorCode.none)

    channel._request = respond  # type: ignore[method-assign]
    framed = asyncio.run(channel.forward(b"frame", "10.1.2.3:5000", "User:alice"))
    assert framed == b"\x00\x00\x00\x04\x00\x00\x00\x01"
    assert deserialize_principal(sent[0].request_principal) == "User:alice"
    assert sent[0].client_host_address == bytes([10, 1, 2, 3])


def test_the_acl_apis_answer_security_disabled_without_an_authorizer(tmp_path: Path) -> None:
    """The default broker (`authorizer.class.name` empty) allows every request and has no ACLs to manage."""
    broker = Broker(load_broker_config({"log.dirs": str(tmp_path / "data"), "node.id": "1",
                                        "log.cleaner.enable": "false",
                                        "listeners": "PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0"}))
    acl_cases = [case for case in CLIENT_CASES if case.api_key in (29, 30, 31)]
    seed = Seed(uuid.uuid4(), broker.cluster_id)
    try:
        answers = [asyncio.run(send(broker.apis, case, seed, MALLORY)) for case in acl_cases]
    finally:
        broker.logs.close()
        broker.metadata_log.close()
    assert [set(error_codes(answer)) for answer in answers] == [{ErrorCode.security_disabled}] * 3


def test_a_request_to_a_controller_that_lost_the_leadership_is_given_up_when_another_is_elected() -> None:
    """Not after `controller.socket.timeout.ms`: a heartbeat waiting that long on a cut-off controller got its broker
    fenced by the new one (tests/integration/test_hosts.py cuts the controller's host off)."""
    listeners: list[Any] = []

    class Raft:
        role_listeners = listeners

        async def wait_for_leader(self, _timeout: float) -> int:
            return 2

    class Silent:  # the old controller's connection: its answer never comes
        async def request(self, _message: Any, _version: int) -> Any:
            await asyncio.Event().wait()

    channel = ControllerChannel(1, Raft(), None, {2: ("10.0.0.2", 9093)}, 30.0)  # type: ignore[arg-type]
    channel._connections[2] = Silent()  # type: ignore[assignment]

    async def scenario() -> float:
        started = asyncio.get_running_loop().time()
        pending = asyncio.create_task(channel._request(object(), 0))
        await asyncio.sleep(0.05)
        for listener in listeners:
            listener(None, 5, None)  # an election under way: the old controller may still answer
        await asyncio.sleep(0.05)
        assert not pending.done()
        for listener in listeners:
            listener(None, 6, 3)  # node 3 leads now
        with pytest.raises(ControllerUnavailable, match="no longer the active controller"):
            async with asyncio.timeout(5):  # before the fix, it waited for the silent controller's answer
                await pending
        return asyncio.get_running_loop().time() - started

    assert asyncio.run(scenario()) < 1.0
    assert channel._moved_waiters == []
