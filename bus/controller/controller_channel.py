"""This node's requests to the active controller (Kafka's NodeToControllerChannelManager), on a node of a quorum.

- **Forwarding (KIP-590).** An admin request (CreateTopics, DeleteTopics, CreatePartitions, AlterConfigs,
  IncrementalAlterConfigs, ElectLeaders, CreateAcls, DeleteAcls, ...) that reaches a node which is not the active
  controller is wrapped, frame as received, in an Envelope (API 58) with the client's principal and address and sent
  to the active controller's controller listener, which authorizes and runs it as that principal and returns the
  response frame; the client sees one answer, as if this node had run it. When no controller can be
  reached, or it stopped being active meanwhile, the client gets NOT_CONTROLLER (retriable) in every error field.
- **AllocateProducerIds (67)** for a non-active node's InitProducerId.
- **AlterPartition (56)**: a partition leader's ISR change, answered with the partition's committed new state.
- **BrokerRegistration (62)**: where this node serves clients, committed by the active controller so every
  node's Metadata lists it, then **BrokerHeartbeat (63)** every `broker.heartbeat.interval.ms` to keep its session
  (the controller fences a broker whose heartbeats stop; the next one unfences it). `request_shutdown` is one
  heartbeat with `want_shut_down` (controlled shutdown): True once the controller moved every leadership away.

The active controller is the raft leader; the controller listener of each voter is in `controller.quorum.voters`.
Envelope frames carry the request header and body without the size prefix, as Kafka's do.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import logging
import struct
import time
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from kio.schema.errors import ErrorCode

from bus.controller.controller import ControllerError
from bus.controller.image import PartitionState
from bus.network.network_client import NodeConnection, NodeConnectionError
from bus.network.node_security import NO_SECURITY, NodeSecurity
from bus.protocol import client_codec
from bus.protocol import header as hdr
from bus.protocol.error_response import answers_only
from bus.protocol.messages import request_shapes
from bus.raft.driver import RaftDriver, RaftStoppedError
from bus.raft.roles import Role
from bus.security.acls import serialize_principal

if TYPE_CHECKING:
    from bus.controller.controller import QuorumController

log = logging.getLogger(__name__)
T = TypeVar("T")

CREATE_TOPICS = 19
CREATE_TOPICS_VERSION = 7
ENVELOPE = 58
BROKER_REGISTRATION = 62
BROKER_HEARTBEAT = 63
ALLOCATE_PRODUCER_IDS = 67
ALTER_PARTITION = 56
ALTER_PARTITION_VERSION = 3
# CreateTopics, DeleteTopics, CreateAcls, DeleteAcls, AlterConfigs, CreatePartitions, ElectLeaders,
# IncrementalAlterConfigs, AlterPartitionReassignments, ListPartitionReassignments, AlterUserScramCredentials:
# Kafka's forwardable admin APIs that this broker serves.
FORWARDED_APIS = frozenset({19, 20, 30, 31, 33, 37, 43, 44, 45, 46, 51})
REGISTRATION_RETRY_S = 0.5
FORWARD_RETRY_S = 10.0  # how long a forwarded request waits out a controller failover before NOT_CONTROLLER
FORWARD_BACKOFF_S = 0.1


class ControllerUnavailable(Exception):
    """No active controller answered (none elected, unreachable, or it lost the leadership meanwhile)."""


class ControllerChannel:
    def __init__(self, node_id: int, raft: RaftDriver, controller: QuorumController,
                 voters: Mapping[int, tuple[str, int]], request_timeout_s: float,
                 security: NodeSecurity = NO_SECURITY) -> None:
        self.node_id = node_id
        self.security = security  # how the controllers' listener is reached
        self.raft = raft
        self.controller = controller
        self.voters = dict(voters)
        self.request_timeout_s = request_timeout_s
        self._connections: dict[int, NodeConnection] = {}
        self._creating: dict[str, asyncio.Task[None]] = {}  # topics being auto-created through the controller
        self.incarnation_id = uuid.uuid4()  # this process's, in every registration it sends (Kafka's)
        self.registered_listeners: list[Callable[[], None]] = []  # told each time a registration is applied here
        self._applying: asyncio.Task[None] | None = None
        self._moved_waiters: list[tuple[int, asyncio.Future[int]]] = []  # (controller asked, set: a new one leads)
        raft.role_listeners.append(self._leader_changed)

    def forwards(self, api_key: int) -> bool:
        return api_key in FORWARDED_APIS and not self.controller.active

    async def _request(self, message: Any, version: int) -> Any:
        """Send `message` to the active controller's controller listener and return its response."""
        try:
            leader = await self.raft.wait_for_leader(self.request_timeout_s)
        except (TimeoutError, RaftStoppedError) as exc:
            raise ControllerUnavailable(f"no active controller: {exc or 'none elected in time'}") from None
        connection = self._connections.get(leader)
        if connection is None:
            host, port = self.voters[leader]
            connection = self._connections[leader] = NodeConnection(
                host, port, f"controller-channel-{self.node_id}", request_timeout_s=self.request_timeout_s,
                connect_timeout_s=self.request_timeout_s, security=self.security)
        moved = asyncio.get_running_loop().create_future()
        self._moved_waiters.append((leader, moved))
        sent = asyncio.ensure_future(connection.request(message, version))
        try:
            await asyncio.wait((sent, moved), return_when=asyncio.FIRST_COMPLETED)
            if not sent.done():
                raise ControllerUnavailable(f"controller {leader} is no longer the active controller (now "
                                            f"{moved.result()}): its answer is not waited for")
            return sent.result()
        except NodeConnectionError as exc:
            raise ControllerUnavailable(f"controller {leader}: {exc}") from None
        finally:
            sent.cancel()
            moved.cancel()
            with contextlib.suppress(ValueError):
                self._moved_waiters.remove((leader, moved))

    def _leader_changed(self, _role: Role, _epoch: int, leader: int | None) -> None:
        """A request on its way to a controller that lost the quorum's leadership is given up at once, so that the
        caller asks the new one: a heartbeat waiting out `controller.socket.timeout.ms` (30 s) for a controller that
        was cut off the network got this broker fenced by the new one after `broker.session.timeout.ms`."""
        if leader is None:
            return  # an election under way: the old controller may still answer, or lead again
        for sent_to, moved in list(self._moved_waiters):
            if sent_to != leader and not moved.done():
                moved.set_result(leader)

    async def forward(self, frame: bytes, peer: str, principal: str) -> bytes:
        """The response frame (size prefix included) of `frame`, sent by `principal` from `peer`, as the active
        controller answered it.

        While there is no active controller (an election, or a new leader that has not caught up; this node's own
        controller listener when it leads), the envelope is sent again after a backoff for up to
        `FORWARD_RETRY_S`, as Kafka's ForwardingManager retries, so a failover rarely reaches the client. So is one
        the controller answered NOT_CONTROLLER throughout (it lost the leadership before the change committed):
        librdkafka's admin calls do not retry that per-topic error, they fail the call.
        """
        envelope = request_shapes(ENVELOPE, 0).make(
            "EnvelopeRequest", request_data=bytes(frame), request_principal=serialize_principal(principal),
            client_host_address=_address_bytes(peer))
        deadline = time.monotonic() + min(FORWARD_RETRY_S, self.request_timeout_s)
        while True:
            try:
                response = await self._request(envelope, 0)
            except ControllerUnavailable as exc:
                error = exc
            else:
                if response.error_code == ErrorCode.none and response.response_data is not None:
                    data: bytes = response.response_data
                    answer = struct.pack(">i", len(data)) + data
                    if not _lost_leadership(frame, data) or time.monotonic() + FORWARD_BACKOFF_S >= deadline:
                        return answer
                    error = ControllerUnavailable("the controller lost its leadership before the change committed")
                else:
                    error = ControllerUnavailable(f"the controller refused the envelope: {response.error_code.name}")
                    if response.error_code != ErrorCode.not_controller:
                        raise error
            if time.monotonic() + FORWARD_BACKOFF_S >= deadline:
                raise error
            await asyncio.sleep(FORWARD_BACKOFF_S)

    def create_topic_soon(self, name: str, principal: str, peer: str) -> None:
        """Auto-create `name` with the defaults through the active controller, in the background (Kafka's
        AutoTopicCreationManager), as `principal` at `peer`, whose Metadata request asked for it; one request per
        topic at a time."""
        if name in self._creating:
            return
        task = self._creating[name] = asyncio.create_task(self._create_topic(name, principal, peer))
        task.add_done_callback(lambda _task: self._creating.pop(name, None))

    async def _create_topic(self, name: str, principal: str, peer: str) -> None:
        shapes = request_shapes(CREATE_TOPICS, CREATE_TOPICS_VERSION)
        topic = shapes.make("CreatableTopic", name=name, num_partitions=-1, replication_factor=-1, assignments=(),
                            configs=())
        request = shapes.make("CreateTopicsRequest", topics=(topic,), validate_only=False,
                              timeout=datetime.timedelta(seconds=self.request_timeout_s))
        frame = client_codec.encode_request(0, f"auto-create-{self.node_id}", request, CREATE_TOPICS_VERSION)
        try:
            await self.forward(bytes(frame[4:]), peer, principal)
        except ControllerUnavailable as exc:
            log.info("auto-creation of %s not forwarded: %s", name, exc)

    async def allocate_producer_ids(self) -> range:
        request = request_shapes(ALLOCATE_PRODUCER_IDS, 0).make("AllocateProducerIdsRequest",
                                                                broker_id=self.node_id, broker_epoch=-1)
        response = await self._request(request, 0)
        if response.error_code != ErrorCode.none:
            raise ControllerUnavailable(f"AllocateProducerIds failed: {response.error_code.name}")
        return range(response.producer_id_start, response.producer_id_start + response.producer_id_len)

    async def _locally(self, operation: Callable[[], T]) -> T:
        """`operation` on this node's own (active) controller, once what it changed is committed; NOT_CONTROLLER
        (the leadership was lost first) is ControllerUnavailable, as from a remote controller."""
        try:
            result = operation()
            await self.controller.log.sync()
        except ControllerError as exc:
            if exc.code == ErrorCode.not_controller:
                raise ControllerUnavailable(exc.message) from None
            raise
        return result

    async def alter_partition(self, topic_id: uuid.UUID, partition: int, leader_epoch: int, partition_epoch: int,
                              new_isr: list[int]) -> PartitionState:
        """Ask the active controller to set this leader's partition ISR to `new_isr`; returns the partition's
        state once the change is committed. Raises ControllerError for a refusal (FENCED_LEADER_EPOCH,
        INVALID_UPDATE_VERSION, INELIGIBLE_REPLICA, ...: the leader waits for newer metadata) and
        ControllerUnavailable when no active controller answered or the change could not be committed (retry)."""
        if self.controller.active:
            return await self._locally(lambda: self.controller.alter_partition(
                self.node_id, topic_id, partition, leader_epoch, partition_epoch, list(new_isr)))
        shapes = request_shapes(ALTER_PARTITION, ALTER_PARTITION_VERSION)
        members = tuple(shapes.make("BrokerState", broker_id=b, broker_epoch=-1) for b in new_isr)
        wanted = shapes.make("PartitionData", partition_index=partition, leader_epoch=leader_epoch,
                             new_isr_with_epochs=members, leader_recovery_state=0, partition_epoch=partition_epoch)
        request = shapes.make("AlterPartitionRequest", broker_id=self.node_id, broker_epoch=-1,
                              topics=(shapes.make("TopicData", topic_id=topic_id, partitions=(wanted,)),))
        response = await self._request(request, ALTER_PARTITION_VERSION)
        answered = [p for t in response.topics if t.topic_id == topic_id for p in t.partitions
                    if p.partition_index == partition]
        code = answered[0].error_code if response.error_code == ErrorCode.none and answered else response.error_code
        if code == ErrorCode.not_controller:
            raise ControllerUnavailable("the controller stopped being active before the ISR change committed")
        if code != ErrorCode.none or not answered:
            raise ControllerError(code if code != ErrorCode.none else ErrorCode.unknown_server_error,
                                  f"AlterPartition of {topic_id}-{partition} refused: {code.name}")
        result = answered[0]
        topic = self.controller.image.topics_by_id.get(topic_id)
        current = topic.partitions.get(partition) if topic else None
        return PartitionState(partition, list(current.replicas) if current else [], [int(b) for b in result.isr],
                              int(result.leader_id), int(result.leader_epoch), int(result.partition_epoch))

    async def request_shutdown(self) -> bool:
        """One controlled-shutdown heartbeat: the controller moves this broker's leaderships and ISR memberships
        away; True once it leads nothing and may stop (the caller repeats it every heartbeat interval until then).
        Raises ControllerUnavailable when no active controller answered, ControllerError for a refusal."""
        if self.controller.active:
            return await self._locally(lambda: self.controller.broker_heartbeat(self.node_id, want_shut_down=True))
        request = request_shapes(BROKER_HEARTBEAT, 0).make(
            "BrokerHeartbeatRequest", broker_id=self.node_id, broker_epoch=-1, current_metadata_offset=-1,
            want_fence=False, want_shut_down=True)
        response = await self._request(request, 0)
        if response.error_code == ErrorCode.not_controller:
            raise ControllerUnavailable("the controller stopped being active before the shutdown step committed")
        if response.error_code != ErrorCode.none:
            raise ControllerError(response.error_code, f"controlled shutdown refused: {response.error_code.name}")
        return bool(response.should_shut_down)

    async def run_lifecycle(self, cluster_id: str, endpoints: list[tuple[str, str, int]], rack: str | None,
                            heartbeat_interval_s: float) -> None:
        """Register, then heartbeat until cancelled; registers again when the controller no longer knows us."""
        while True:
            await self.register(cluster_id, endpoints, rack)
            while await self._heartbeat():
                await asyncio.sleep(heartbeat_interval_s)

    async def _heartbeat(self) -> bool:
        """One heartbeat; False when this broker must register again."""
        try:
            if self.controller.active:
                written = self.controller.log.written
                self.controller.broker_heartbeat(self.node_id)
                if self.controller.log.written != written:
                    await self.controller.log.sync()
                return True
            request = request_shapes(BROKER_HEARTBEAT, 0).make(
                "BrokerHeartbeatRequest", broker_id=self.node_id, broker_epoch=-1, current_metadata_offset=-1,
                want_fence=False, want_shut_down=False)
            response = await self._request(request, 0)
            code = response.error_code
        except ControllerUnavailable as exc:
            log.debug("heartbeat not sent: %s", exc)
            return True
        except ControllerError as exc:
            code = exc.code
        if code == ErrorCode.broker_id_not_registered:
            return False
        if code != ErrorCode.none:
            log.debug("heartbeat answered %s", code.name)
        return True

    async def register(self, cluster_id: str, endpoints: list[tuple[str, str, int]], rack: str | None) -> None:
        """Register this broker with the active controller, retrying until it is committed (or cancelled)."""
        shapes = request_shapes(BROKER_REGISTRATION, 0)
        request = shapes.make(
            "BrokerRegistrationRequest", broker_id=self.node_id, cluster_id=cluster_id,
            incarnation_id=self.incarnation_id,
            listeners=tuple(shapes.make("Listener", name=name, host=host, port=port, security_protocol=0)
                            for name, host, port in endpoints),
            features=(), rack=rack)
        while True:
            try:
                if self.controller.active:
                    self.controller.register_broker(self.node_id, endpoints, rack, str(self.incarnation_id))
                    await self.controller.log.sync()
                    break
                response = await self._request(request, 0)
                if response.error_code == ErrorCode.none:
                    break
                log.info("broker registration refused: %s; retrying", response.error_code.name)
            except ControllerUnavailable as exc:
                log.info("broker registration: %s; retrying", exc)
            except ControllerError as exc:  # our own controller lost the leadership before it committed
                log.info("broker registration: %s; retrying", exc.message)
            await asyncio.sleep(REGISTRATION_RETRY_S)
        log.info("broker %d registered with the active controller", self.node_id)
        if self._applying is None or self._applying.done():  # heartbeats start meanwhile: the session must live
            self._applying = asyncio.create_task(self._tell_once_applied())

    async def _tell_once_applied(self) -> None:
        """Tell `registered_listeners` once this node's metadata image holds this registration: everything
        committed before it (the fencing of an earlier incarnation, the leaderships that moved away from it) is
        then applied here too, so the partitions this broker opens next are the ones it really leads or follows
        (Kafka's brokers wait for their initial metadata catch-up the same way)."""
        incarnation = str(self.incarnation_id)
        while (registered := self.controller.image.brokers.get(self.node_id)) is None or (
                registered.incarnation_id != incarnation):
            await asyncio.sleep(REGISTRATION_RETRY_S / 10)
        for listener in self.registered_listeners:
            listener()

    async def close(self) -> None:
        for task in [*self._creating.values(), *([self._applying] if self._applying else [])]:
            task.cancel()
        for connection in self._connections.values():
            await connection.close()


def _lost_leadership(request_frame: bytes, response_frame: bytes) -> bool:
    """Whether the controller answered the request in `request_frame` NOT_CONTROLLER in every error field."""
    try:
        api_key, version, _correlation = hdr.peek_api(request_frame)
        response = client_codec.decode_response(response_frame, api_key, version)
    except Exception:  # kio raises assorted errors on a frame it cannot read: the client gets it as it came
        return False
    return answers_only(response, ErrorCode.not_controller)


def _address_bytes(peer: str) -> bytes:
    """The client's IP address as Kafka puts it in an Envelope (4 or 16 bytes); empty when it has none."""
    host = peer.rsplit(":", 1)[0].strip("[]")
    try:
        return ipaddress.ip_address(host).packed
    except ValueError:
        return b""
