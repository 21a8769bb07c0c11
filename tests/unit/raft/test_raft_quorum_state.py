"""The quorum-state file: Kafka's JSON, atomic replacement, and a loud error (never a reset) when corrupt."""

import json
from pathlib import Path

import pytest

from bus.raft.quorum_state import ElectionState, FileQuorumStateStore, QuorumStateError


def test_missing_file_reads_as_no_state(tmp_path: Path) -> None:
    assert FileQuorumStateStore(tmp_path).read() is None


def test_round_trip_uses_kafkas_field_names(tmp_path: Path) -> None:
    store = FileQuorumStateStore(tmp_path)
    state = ElectionState(epoch=5, leader_id=2, voted_id=3, voters=frozenset({1, 2, 3}))
    store.write(state)
    assert store.read() == state
    data = json.loads((tmp_path / "quorum-state").read_text())
    assert data == {
        "clusterId": "",
        "leaderId": 2,
        "leaderEpoch": 5,
        "votedId": 3,
        "appliedOffset": 0,
        "currentVoters": [{"voterId": 1}, {"voterId": 2}, {"voterId": 3}],
        "data_version": 0,
    }


def test_write_replaces_atomically_and_leaves_no_temp_file(tmp_path: Path) -> None:
    store = FileQuorumStateStore(tmp_path)
    store.write(ElectionState(epoch=1, voted_id=1, voters=frozenset({1})))
    store.write(ElectionState(epoch=2, leader_id=1, voters=frozenset({1})))
    assert store.read() == ElectionState(epoch=2, leader_id=1, voters=frozenset({1}))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["quorum-state"]


def test_reads_a_file_written_by_kafka(tmp_path: Path) -> None:
    (tmp_path / "quorum-state").write_text(
        '{"clusterId":"","leaderId":-1,"leaderEpoch":7,"votedId":1,"appliedOffset":0,'
        '"currentVoters":[{"voterId":1},{"voterId":2},{"voterId":3}],"data_version":0}'
    )
    assert FileQuorumStateStore(tmp_path).read() == ElectionState(7, -1, 1, frozenset({1, 2, 3}))


@pytest.mark.parametrize(
    "content",
    [
        "",
        "{not json",
        "[]",
        '{"leaderId":1,"votedId":-1}',
        '{"leaderId":1,"leaderEpoch":"3","votedId":-1}',
        '{"leaderId":1,"leaderEpoch":true,"votedId":-1}',
        '{"leaderId":1,"leaderEpoch":-4,"votedId":-1}',
        '{"leaderId":1,"leaderEpoch":3,"votedId":-1,"data_version":9}',
        '{"leaderId":1,"leaderEpoch":3,"votedId":-1,"currentVoters":[{"id":1}]}',
    ],
)
def test_corrupt_file_is_an_error_naming_the_file(tmp_path: Path, content: str) -> None:
    (tmp_path / "quorum-state").write_text(content)
    with pytest.raises(QuorumStateError, match="quorum-state"):
        FileQuorumStateStore(tmp_path).read()
