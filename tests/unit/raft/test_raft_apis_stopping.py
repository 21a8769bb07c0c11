"""A KRaft request reaching a node whose raft client has stopped closes the connection (the peer tries elsewhere),
as Kafka's does once its raft client has shut down; before, it was answered UNKNOWN_SERVER_ERROR and logged as a
failed handler with a traceback on every clean shutdown of a cluster node."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from bus.broker.controller_apis import _raft
from bus.network.errors import CloseConnection
from bus.raft import wire
from bus.raft.driver import RaftStoppedError
from bus.raft.messages import VoteRequest, VoteResponse


class StoppedRaft:
    async def handle_request(self, request: Any) -> Any:
        raise RaftStoppedError("raft node 2 is stopped")


class RunningRaft:
    async def handle_request(self, request: Any) -> Any:
        return VoteResponse(ErrorCode.none, leader_id=-1, leader_epoch=7, vote_granted=True)


def context(raft: object) -> Any:
    return SimpleNamespace(api_key=wire.VOTE, authorize_cluster=lambda operation: True,
                           services=SimpleNamespace(raft=raft), metadata=SimpleNamespace(cluster_id="cluster-a"))


VOTE = wire.to_kio(VoteRequest("cluster-a", replica_epoch=7, replica_id=2, last_offset_epoch=6, last_offset=120))


def test_a_stopped_raft_node_closes_the_connection_instead_of_failing_the_request() -> None:
    with pytest.raises(CloseConnection, match="stopping"):
        asyncio.run(_raft.answer(context(StoppedRaft()), VOTE))


def test_a_running_raft_node_answers() -> None:
    answer = asyncio.run(_raft.answer(context(RunningRaft()), VOTE))
    assert wire.from_kio(answer) == VoteResponse(ErrorCode.none, leader_id=-1, leader_epoch=7, vote_granted=True)


class LateRaft:
    """A node whose reply missed the request timeout (its process was paused past it)."""

    async def handle_request(self, request: Any) -> Any:
        raise TimeoutError


def test_a_reply_that_missed_the_request_timeout_closes_the_connection_instead_of_failing_the_request() -> None:
    """A chaos run's SIGSTOP pauses logged these as failed handlers with a traceback (17 in 30 minutes)."""
    with pytest.raises(CloseConnection, match="no raft reply to VoteRequest within the request timeout"):
        asyncio.run(_raft.answer(context(LateRaft()), VOTE))
