"""replication-offset-checkpoint in Kafka's format: round trip, what Kafka writes, and damaged files."""

from __future__ import annotations

from pathlib import Path

import pytest

from bus.log.offset_checkpoint import (
    REPLICATION_OFFSET_CHECKPOINT,
    CorruptOffsetCheckpointError,
    read_offset_checkpoint,
    write_offset_checkpoint,
)
from bus.protocol.topic_partition import TopicPartition


def test_round_trip_in_kafkas_format(tmp_path: Path) -> None:
    path = tmp_path / REPLICATION_OFFSET_CHECKPOINT
    offsets = {TopicPartition("cameras", 0): 1200, TopicPartition("cameras", 11): 0,
               TopicPartition("__consumer_offsets", 3): 77}
    write_offset_checkpoint(path, offsets)
    assert path.read_text() == "0\n3\ncameras 0 1200\ncameras 11 0\n__consumer_offsets 3 77\n"
    assert read_offset_checkpoint(path) == offsets
    assert not path.with_name(path.name + ".tmp").exists()
    write_offset_checkpoint(path, {})  # replaced whole, not merged
    assert read_offset_checkpoint(path) == {}


def test_a_file_kafka_wrote_reads(tmp_path: Path) -> None:
    path = tmp_path / REPLICATION_OFFSET_CHECKPOINT
    path.write_bytes(b"0\n2\nevents.v1 0 42\nevents.v1 1 9\n")
    assert read_offset_checkpoint(path) == {TopicPartition("events.v1", 0): 42, TopicPartition("events.v1", 1): 9}


def test_missing_or_empty_holds_no_offsets(tmp_path: Path) -> None:
    path = tmp_path / REPLICATION_OFFSET_CHECKPOINT
    assert read_offset_checkpoint(path) == {}
    path.write_bytes(b"")
    assert read_offset_checkpoint(path) == {}


@pytest.mark.parametrize(("content", "where"), [
    (b"1\n0\n", "line 1: unrecognised version 1"),
    (b"zero\n", "line 1: expected an integer, found 'zero'"),
    (b"0\n", "line 2: expected an integer, found nothing"),
    (b"0\n2\nt 0 5\n", "expected 2 entries but found 1"),
    (b"0\n1\nt 0 5\nt 1 6\n", "expected 1 entries but found 2"),
    (b"0\n2\nt 0 5\nt 1\n", "line 4: malformed entry 't 1'"),
    (b"0\n1\nt zero 5\n", "line 3: malformed entry 't zero 5'"),
    (b"0\n1\nt 0 5 9\n", "line 3: malformed entry"),
    (b"0\n2\nt 0 5\nt 0 6\n", "line 4: invalid or repeated partition"),
    (b"0\n1\nt -1 5\n", "line 3: invalid or repeated partition"),
    (b"0\n1\n\xff 0 5\n", "not a text file"),
])
def test_a_damaged_file_is_a_clear_error_naming_path_and_line(tmp_path: Path, content: bytes, where: str) -> None:
    path = tmp_path / REPLICATION_OFFSET_CHECKPOINT
    path.write_bytes(content)
    with pytest.raises(CorruptOffsetCheckpointError) as refused:
        read_offset_checkpoint(path)
    assert str(refused.value).startswith(str(path))
    assert where in str(refused.value)


def test_a_topic_name_the_format_cannot_hold_is_refused_before_writing(tmp_path: Path) -> None:
    path = tmp_path / REPLICATION_OFFSET_CHECKPOINT
    write_offset_checkpoint(path, {TopicPartition("t", 0): 1})
    with pytest.raises(ValueError, match="cannot be written"):
        write_offset_checkpoint(path, {TopicPartition("a b", 0): 1})
    assert read_offset_checkpoint(path) == {TopicPartition("t", 0): 1}  # the old checkpoint is intact
