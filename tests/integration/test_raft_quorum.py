"""A three-node KRaft quorum of real broker processes (`process.roles=broker,controller`), judged by
`bus metadata-quorum` as an operator runs it: a leader is elected, a SIGKILLed leader is replaced, and the
restarted node rejoins as a follower that catches up.
"""

from __future__ import annotations

import json
import random
import re
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from bus.client.admin import QuorumInfo
from bus.protocol import client_codec
from bus.raft import wire
from bus.raft.messages import FetchRequest, VoteRequest
from bus.security.acls import ANONYMOUS, serialize_principal
from deploy.processes.broker import BrokerProcess
from deploy.processes.cluster import CLUSTER_ID, ClusterProcess, until
from deploy.processes.cluster import describe_quorum as describe
from testkit.raw_kafka import RawKafka, api_versions_request, header_only, metadata_request
from tests.integration._support_tools import bus, ok


@pytest.fixture
def quorum(tmp_path: Path) -> Iterator[dict[int, BrokerProcess]]:
    cluster = ClusterProcess(tmp_path, 3)
    try:
        yield cluster.start().nodes
    finally:
        cluster.stop()


def fields(output: str) -> dict[str, str]:
    return dict(re.findall(r"^(\w+):\s+(.*)$", output, re.MULTILINE))


def rows(output: str) -> dict[int, list[str]]:
    lines = output.strip().splitlines()
    assert lines[0].split() == ["NodeId", "LogEndOffset", "Lag", "LastFetchTimestamp", "LastCaughtUpTimestamp",
                                "Status"], output
    return {int(cells[0]): cells for cells in (line.split() for line in lines[1:])}


@pytest.mark.slow
def test_quorum_elects_fails_over_and_a_restarted_leader_rejoins(quorum: dict[int, BrokerProcess]) -> None:
    first = until(lambda: describe(quorum[1]), 15, "a leader")
    assert first.leader_id in quorum and [v.replica_id for v in first.voters] == [1, 2, 3]

    status = fields(ok(bus("metadata-quorum", "--bootstrap-server", quorum[2].bootstrap, "describe", "--status")))
    assert status["ClusterId"] == CLUSTER_ID
    assert int(status["LeaderId"]) == first.leader_id
    assert int(status["LeaderEpoch"]) == first.leader_epoch
    assert int(status["HighWatermark"]) >= 1  # the leader's LeaderChange record is committed
    assert status["CurrentVoters"] == "[1,2,3]" and status["CurrentObservers"] == "[]"

    old = first.leader_id
    survivor = quorum[1 if old != 1 else 2]
    killed_at = time.monotonic()
    quorum[old].kill()

    def new_leader() -> QuorumInfo | None:
        info = describe(survivor)
        return info if info is not None and info.leader_id != old else None

    second = until(new_leader, 20, "a new leader")
    failover = time.monotonic() - killed_at
    print(f"\nleader {old} SIGKILLed: node {second.leader_id} leads epoch {second.leader_epoch} after {failover:.2f}s")
    assert second.leader_epoch > first.leader_epoch
    assert failover < 10, f"failover took {failover:.1f}s with the default 2 s fetch timeout"

    # What the killed leader wrote is on its disk: the raft log (at least its LeaderChange) and its election state.
    raft_dir = quorum[old].data_dir / "__cluster_metadata-0" / "raft"
    assert (raft_dir / "00000000000000000000.log").stat().st_size > 0
    state = json.loads((raft_dir / "quorum-state").read_text())
    assert state["leaderId"] == old and state["leaderEpoch"] == first.leader_epoch

    restarted_at_ms = int(time.time() * 1000)
    quorum[old].start()

    def caught_up() -> dict[int, list[str]] | None:
        result = bus("metadata-quorum", "--bootstrap-server", quorum[old].bootstrap, "describe", "--replication")
        if result.returncode != 0:
            return None
        table = rows(result.stdout)
        rejoined = table.get(old)
        if rejoined and rejoined[5] == "Follower" and rejoined[2] == "0" and int(rejoined[4]) >= restarted_at_ms:
            return table
        return None

    table = until(caught_up, 20, f"node {old} caught up as a follower")
    assert table[second.leader_id][5] == "Leader"
    assert sorted(table) == [1, 2, 3]
    human = ok(bus("metadata-quorum", "--bootstrap-server", survivor.bootstrap, "describe", "--replication",
                   "--human-readable"))
    assert re.search(rf"^{old}\s+\d+\s+0\s+\d+ ms ago\s+\d+ ms ago\s+Follower$", human, re.MULTILINE), human


def test_describe_quorum_without_voters_is_a_clear_error(make_broker) -> None:
    broker = make_broker({"controller.quorum.voters": ""})
    result = bus("metadata-quorum", "--bootstrap-server", broker.bootstrap, "describe", "--status")
    assert result.returncode == 1
    assert "NOT_CONTROLLER" in result.stderr, result.stderr


def test_metadata_quorum_flags_are_checked() -> None:
    for args, message in ((["describe"], "One of --status or --replication"),
                          (["describe", "--status", "--replication"], "Only one of --status or --replication"),
                          (["describe", "--status", "--human-readable"], "--human-readable is only supported")):
        result = bus("metadata-quorum", "--bootstrap-server", "127.0.0.1:1", *args)
        assert result.returncode == 1 and message in result.stderr, result.stderr


def test_the_controller_listener_serves_only_kraft_and_survives_bad_requests(broker: BrokerProcess) -> None:
    """The controller listener advertises exactly KRaft's RPCs and the controller APIs brokers use (AlterPartition,
    Envelope, BrokerRegistration, BrokerHeartbeat, AllocateProducerIds) and SASL's two (the nodes log in there on a
    SASL controller listener), answers another cluster's or another topic's request with Kafka's errors, refuses
    client APIs, and a seeded fuzz of its APIs leaves the quorum working."""
    controller = f"127.0.0.1:{broker.controller_port}"
    with RawKafka(controller) as raw:
        served = {int(k.api_key): (int(k.min_version), int(k.max_version))
                  for k in raw.request(api_versions_request()).api_keys}
        assert served == {1: (12, 12), 17: (0, 1), 18: (0, 4), 36: (0, 2), 52: (0, 0), 53: (0, 0), 54: (0, 0),
                          55: (1, 1), 56: (2, 3), 58: (0, 0), 59: (0, 0), 62: (0, 1), 63: (0, 1), 67: (0, 0)}
        foreign = raw.request(wire.to_kio(VoteRequest("another-cluster", 7, 1, 0, 0)))
        assert foreign.topics[0].partitions[0].error_code == ErrorCode.inconsistent_cluster_id
        fetch = wire.to_kio(FetchRequest(None, 1, 0, 1, 0, 0))
        not_metadata = replace(fetch, topics=(replace(fetch.topics[0], topic="orders"),))
        refused = raw.request(not_metadata)  # top-level INVALID_REQUEST without topics, as KRaft answers it
        assert refused.error_code == ErrorCode.invalid_request and refused.responses == ()
        raw.send_frame(raw.encode(metadata_request()))  # a client API: UNSUPPORTED_VERSION, as for any unknown API
        assert raw.read_frame()[4:6] == ErrorCode.unsupported_version.value.to_bytes(2, "big")

    rng = random.Random(16)
    for i in range(150):
        key, (low, high) = rng.choice(sorted(served.items()))
        body = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 120)))
        if rng.random() < 0.5:  # a plausible start: empty tagged fields, small counts
            body = b"\x00" + bytes(rng.choice([0, 1, 2, 0xFF]) for _ in range(8)) + body
        with RawKafka(controller, timeout=3) as raw:
            raw.send_frame(header_only(key, rng.randrange(low, high + 1), i, flexible=rng.random() < 0.5) + body)
    info = until(lambda: describe(broker), 10, "the quorum after the fuzz")
    assert info.leader_id == 1 and [v.replica_id for v in info.voters] == [1]
    logs = broker.logs()
    assert "Traceback" not in logs and "internal error" not in logs, logs[-3000:]


def test_an_envelope_runs_a_forwardable_request_on_the_active_controller_only(broker: BrokerProcess) -> None:
    """Envelope (58) on the controller listener: a forwarded CreateTopics runs as if the client had sent it, and
    its response frame comes back inside; an API that is never forwarded is INVALID_REQUEST."""
    from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest
    from kio.schema.envelope.v0.request import EnvelopeRequest

    create = CreateTopicsRequest(topics=(CreatableTopic(name="enveloped", num_partitions=2, replication_factor=1,
                                                        assignments=(), configs=()),),
                                 timeout=timedelta(seconds=10), validate_only=False)
    with RawKafka(f"127.0.0.1:{broker.controller_port}") as raw:
        inner = raw.encode(create, correlation_id=77)  # header and body, without the size prefix (as Kafka's)
        # The client's principal as Kafka's DefaultKafkaPrincipalBuilder serializes it: an envelope without one is
        # PRINCIPAL_DESERIALIZATION_FAILURE, as in Kafka.
        answer = raw.request(EnvelopeRequest(request_data=inner, request_principal=serialize_principal(ANONYMOUS),
                                             client_host_address=bytes([127, 0, 0, 1])))
        assert answer.error_code == ErrorCode.none
        assert client_codec.response_correlation_id(answer.response_data) == 77  # the client's
        [topic] = client_codec.decode_response(answer.response_data, 19, 7).topics
        assert (topic.name, topic.error_code, topic.num_partitions) == ("enveloped", ErrorCode.none, 2)
        refused = raw.request(EnvelopeRequest(request_data=raw.encode(metadata_request("enveloped")),
                                              request_principal=serialize_principal(ANONYMOUS),
                                              client_host_address=b""))
        assert refused.error_code == ErrorCode.invalid_request and refused.response_data is None
    with RawKafka(broker.bootstrap) as raw:
        [described] = raw.request(metadata_request("enveloped", allow_auto_create=False)).topics
    assert described.error_code == ErrorCode.none and len(described.partitions) == 2
