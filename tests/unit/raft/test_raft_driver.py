"""RaftDrivers over real localhost sockets in one event loop: election, replication, failover, DescribeQuorum.

Each driver gets a small controller listener (the frame loop below: decode, hand to the driver, encode,
one request at a time per connection as the broker's connections do), so the drivers' NodeConnections,
the ApiVersions negotiation and the wire mapping all run for real; the broker's own controller listener
is exercised by tests/integration/test_raft_quorum.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from bus.broker.apis.api_versions import api_versions_response
from bus.broker.controller_apis import handlers as controller_handlers
from bus.network.network_client import NodeConnection, NodeConnectionError, UnsupportedVersionError
from bus.protocol import header as hdr
from bus.protocol import messages
from bus.raft import wire
from bus.raft.config import QuorumConfig
from bus.raft.driver import RaftDriver, RaftStoppedError
from bus.raft.file_raft_log import FileRaftLog
from bus.raft.messages import DescribeQuorumRequest, Request
from bus.raft.node import NotLeaderError
from bus.raft.quorum_state import MemoryQuorumStateStore
from bus.raft.replicated_log import InMemoryRaftLog, LeaderChangeMessage, LogEntry
from bus.raft.roles import Role
from bus.raft.snapshots import snapshot_path

TIMINGS = {
    "election_timeout_ms": 150,
    "fetch_timeout_ms": 300,
    "election_backoff_max_ms": 150,
    "retry_backoff_ms": 10,
    "request_timeout_ms": 300,
    "fetch_max_wait_ms": 100,
}
CLUSTER = "raft-driver-test"


class ControllerListener:
    """A minimal controller listener in front of one driver."""

    def __init__(self) -> None:
        self.driver: RaftDriver | None = None
        self.server: asyncio.Server | None = None
        self.port = 0
        self.writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.add(writer)
        try:
            while True:
                size = int.from_bytes(await reader.readexactly(4), "big")
                frame = await reader.readexactly(size)
                api_key, version, correlation_id = hdr.peek_api(frame)
                request_cls = messages.request_class(api_key, version)
                header = hdr.parse_request_header(frame, request_cls.__flexible__)  # type: ignore[attr-defined]
                request = messages.decode_request(api_key, version, frame, header.body_offset)
                response: Any
                if api_key == 18:
                    response = api_versions_response(controller_handlers(), messages.shapes(18, version),
                                                     ErrorCode.none)
                else:
                    assert self.driver is not None
                    body = wire.from_kio(request)
                    assert isinstance(body, Request)
                    response = wire.to_kio(await self.driver.handle_request(body))
                flexible = type(response).__flexible__ and api_key != 18
                writer.write(messages.encode_response(correlation_id, response, flexible))
        except (asyncio.IncompleteReadError, ConnectionError, RaftStoppedError):
            pass
        finally:
            self.writers.discard(writer)
            writer.close()

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        for writer in list(self.writers):
            writer.close()
        await self.server.wait_closed()


class Cluster:
    def __init__(self, size: int) -> None:
        self.ids = list(range(1, size + 1))
        self.listeners = {i: ControllerListener() for i in self.ids}
        self.logs = {i: InMemoryRaftLog() for i in self.ids}
        self.stores = {i: MemoryQuorumStateStore() for i in self.ids}
        self.drivers: dict[int, RaftDriver] = {}
        self.committed: dict[int, list[LogEntry]] = {i: [] for i in self.ids}
        self.config = QuorumConfig(voters=frozenset(self.ids), **TIMINGS)  # type: ignore[arg-type]

    async def start(self) -> None:
        for listener in self.listeners.values():
            await listener.start()
        for i in self.ids:
            await self.start_node(i)

    async def start_node(self, node_id: int) -> RaftDriver:
        """(Re)start a node over its log and quorum state, as after a restart of its process."""
        voters = {i: ("127.0.0.1", self.listeners[i].port) for i in self.ids}
        driver = RaftDriver(node_id, self.config, voters, self.logs[node_id], self.stores[node_id], CLUSTER,
                            tick_interval_ms=10, rng=random.Random(node_id))
        driver.committed_listeners.append(self.committed[node_id].extend)
        self.drivers[node_id] = driver
        self.listeners[node_id].driver = driver
        await driver.start()
        return driver

    async def stop(self) -> None:
        for driver in self.drivers.values():
            await driver.stop()
        for listener in self.listeners.values():
            await listener.stop()

    def running(self) -> list[RaftDriver]:
        return [d for d in self.drivers.values() if not d._stopped]

    async def wait_for_leader(self, timeout_s: float = 5.0, exclude: int | None = None) -> RaftDriver:
        """The one leader that every running driver follows."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            running = [d for d in self.running() if d.node_id != exclude]
            leaders = [d for d in running if d.role is Role.LEADER]
            if len(leaders) == 1 and all(d.leader() == leaders[0].node_id for d in running):
                return leaders[0]
            await asyncio.sleep(0.02)
        raise AssertionError({d.node_id: (d.role, d.epoch, d.leader()) for d in self.running()})


@contextlib.asynccontextmanager
async def cluster(size: int) -> AsyncIterator[Cluster]:
    c = Cluster(size)
    await c.start()
    try:
        yield c
    finally:
        await c.stop()


def in_loop(scenario: Callable[[], Coroutine[Any, Any, None]]) -> Callable[[], None]:
    """A test that runs `scenario` in a fresh event loop (the project's tests use asyncio.run, no plugin)."""

    def test() -> None:
        asyncio.run(scenario())

    test.__name__ = scenario.__name__
    return test


def data(entries: list[LogEntry]) -> list[bytes]:
    return [e.record for e in entries if isinstance(e.record, bytes)]


@in_loop
async def test_three_drivers_elect_one_leader_and_replicate_what_it_appends() -> None:
    async with cluster(3) as c:
        leader = await c.wait_for_leader()
        assert len({d.epoch for d in c.running()}) == 1
        last = leader.append([b"a", b"b", b"c"])
        await leader.wait_committed(last, timeout_s=5)
        for node_id in c.ids:
            await c.drivers[node_id].wait_committed(last, timeout_s=5)
            assert data(c.committed[node_id]) == [b"a", b"b", b"c"]
            # The new leader's LeaderChange record is committed first, as KRaft writes it.
            assert isinstance(c.committed[node_id][0].record, LeaderChangeMessage)
            assert c.committed[node_id][0].record.leader_id == leader.node_id


@in_loop
async def test_a_follower_refuses_appends() -> None:
    async with cluster(3) as c:
        leader = await c.wait_for_leader()
        follower = next(d for d in c.running() if d is not leader)
        with pytest.raises(NotLeaderError):
            follower.append([b"x"])


@in_loop
async def test_a_stopped_leader_is_replaced_and_rejoins_as_a_follower_that_catches_up() -> None:
    async with cluster(3) as c:
        first = await c.wait_for_leader()
        first.append([b"before"])
        epoch = first.epoch
        started = time.monotonic()
        await first.stop()  # resigns with EndQuorumEpoch: the successor need not wait for a fetch timeout
        second = await c.wait_for_leader(exclude=first.node_id)
        elapsed = time.monotonic() - started
        assert second.node_id != first.node_id and second.epoch > epoch
        assert elapsed < 2.0, f"a successor took {elapsed:.2f}s"
        last = second.append([b"after"])
        await second.wait_committed(last, timeout_s=5)

        rejoined = await c.start_node(first.node_id)
        await rejoined.wait_committed(last, timeout_s=5)
        assert rejoined.role is Role.FOLLOWER and rejoined.leader() == second.node_id
        assert data(c.committed[first.node_id])[-1:] == [b"after"]
        assert c.logs[first.node_id].end_offset() == c.logs[second.node_id].end_offset()


@in_loop
async def test_describe_on_a_follower_is_forwarded_to_the_leader_with_wall_clock_times() -> None:
    async with cluster(3) as c:
        leader = await c.wait_for_leader()
        await leader.wait_committed(leader.append([b"x"]), timeout_s=5)
        follower = next(d for d in c.running() if d is not leader)
        before = int(time.time() * 1000)
        forwarded = await follower.describe()
        direct = await leader.describe()
        for response in (forwarded, direct):
            assert response.error_code == ErrorCode.none
            assert response.leader_id == leader.node_id and response.leader_epoch == leader.epoch
            assert [v.replica_id for v in response.current_voters] == c.ids
            assert response.high_watermark == leader.high_watermark
            for voter in response.current_voters:
                assert before - 10_000 < voter.last_fetch_timestamp <= int(time.time() * 1000) + 1
        # On the controller listener a follower does not forward: KRaft answers NOT_LEADER_OR_FOLLOWER.
        response = await follower.handle_request(DescribeQuorumRequest())
        assert response.error_code == ErrorCode.not_leader_or_follower


@in_loop
async def test_a_dropped_connection_is_retried_at_once_not_after_an_election() -> None:
    """Fetches lost with a connection come back as BROKER_NOT_AVAILABLE and are retried after the retry
    backoff; waiting out the request timeout (here as long as the fetch timeout) would start elections."""
    async with cluster(3) as c:
        leader = await c.wait_for_leader()
        epoch = leader.epoch
        for _ in range(4):  # each time a parked fetch of each follower is cut off
            await asyncio.sleep(0.25)
            for writer in list(c.listeners[leader.node_id].writers):
                writer.close()
        last = leader.append([b"after the drops"])
        for driver in c.running():
            await driver.wait_committed(last, timeout_s=5)
        assert {d.epoch for d in c.running()} == {epoch}
        assert leader.role is Role.LEADER


@in_loop
async def test_a_lone_voter_leads_at_once_and_commits_alone() -> None:
    async with cluster(1) as c:
        leader = await c.wait_for_leader(timeout_s=1)
        await leader.wait_committed(leader.append([b"solo"]), timeout_s=1)
        assert data(c.committed[1]) == [b"solo"]


def test_the_driver_expires_metadata_history_by_age_between_snapshots(tmp_path: Path) -> None:
    """metadata.max.retention.ms acts without a new snapshot: the driver's periodic clean (KafkaRaftClient's
    snapshot cleaner) moves the log start once the older snapshot is older than the limit."""

    async def scenario() -> None:
        raft_log = FileRaftLog(tmp_path, retention_bytes=-1, retention_ms=60_000)
        config = QuorumConfig(voters=frozenset({1}), **TIMINGS)  # type: ignore[arg-type]
        driver = RaftDriver(1, config, {1: ("127.0.0.1", 1)}, raft_log, MemoryQuorumStateStore(), CLUSTER,
                            tick_interval_ms=10, clean_interval_ms=50)  # fmt: skip
        driver.stop_callbacks.append(raft_log.close)
        await driver.start()
        try:
            first = driver.create_snapshot(await commit(driver, b"a"), b"image of a")
            second = driver.create_snapshot(await commit(driver, b"b"), b"image of a, b")
            assert first is not None and second is not None
            await asyncio.sleep(0.2)
            assert raft_log.start_offset() == 0  # both snapshots are young: the history stays
            old = time.time() - 3600
            os.utime(snapshot_path(tmp_path, first.snapshot_id), (old, old))
            deadline = time.monotonic() + 2
            while raft_log.start_offset() == 0 and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            assert raft_log.start_offset() == second.snapshot_id.offset
            assert raft_log.earliest_snapshot_id() == second.snapshot_id
        finally:
            await driver.stop()

    asyncio.run(scenario())


async def commit(driver: RaftDriver, record: bytes) -> int:
    """Append `record` on a lone voter and wait for it to commit; the offset right after it."""
    offset = driver.append([record])
    await driver.wait_committed(offset, timeout_s=1)
    return offset + 1


@in_loop
async def test_commit_waiters_fail_when_leadership_is_lost() -> None:
    async with cluster(3) as c:
        leader = await c.wait_for_leader()
        for other in c.running():
            if other is not leader:
                await other.stop()
        last = leader.append([b"never committed"])
        with pytest.raises(NotLeaderError):  # check quorum: without a majority the leader resigns
            await leader.wait_committed(last, timeout_s=5)


# ---- NodeConnection ----------------------------------------------------------------------------------


@in_loop
async def test_node_connection_pipelines_reconnects_and_reports_failures() -> None:
    listener = ControllerListener()
    await listener.start()
    store = MemoryQuorumStateStore()
    config = QuorumConfig(voters=frozenset({1}), **TIMINGS)  # type: ignore[arg-type]
    listener.driver = RaftDriver(1, config, {1: ("127.0.0.1", listener.port)}, InMemoryRaftLog(), store, CLUSTER)
    await listener.driver.start()
    connection = NodeConnection("127.0.0.1", listener.port, "test", request_timeout_s=2)
    try:
        request = wire.to_kio(DescribeQuorumRequest())
        responses = await asyncio.gather(*(connection.request(request, 1) for _ in range(5)))
        assert all(wire.from_kio(r).leader_id == 1 for r in responses)  # type: ignore[union-attr]
        assert connection.api_versions[wire.VOTE] == range(0, 1)
        with pytest.raises(UnsupportedVersionError):
            await connection.request(request, 0)
        for writer in list(listener.writers):  # the peer drops the connection: the next request reconnects
            writer.close()
        await asyncio.sleep(0.05)
        assert wire.from_kio(await connection.request(request, 1)).leader_id == 1  # type: ignore[union-attr]
    finally:
        await connection.close()
        await listener.driver.stop()
        await listener.stop()
    dead = NodeConnection("127.0.0.1", listener.port, "test", connect_timeout_s=1)
    with pytest.raises(NodeConnectionError, match="cannot connect"):
        await dead.request(request, 1)
    with pytest.raises(NodeConnectionError, match="backing off"):  # reconnect.backoff.ms: no second attempt yet
        await dead.request(request, 1)


@in_loop
async def test_node_connection_times_out_a_silent_peer() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # reads requests, never answers
        writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    connection = NodeConnection("127.0.0.1", port, "test", request_timeout_s=0.3, connect_timeout_s=0.3)
    try:
        started = time.monotonic()
        with pytest.raises(NodeConnectionError, match="timed out"):
            await connection.request(wire.to_kio(DescribeQuorumRequest()), 1)
        assert time.monotonic() - started < 2
        assert not connection.connected
    finally:
        await connection.close()
        server.close()
        await server.wait_closed()
