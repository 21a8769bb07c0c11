"""Admin client pieces that need no broker: errors, the consumer-protocol codec, bootstrap handling.

The fail-fast tests matter for the tools: an operator pointing `bus topics` at the wrong port, or at
a host that accepts TCP but never answers, must get an error in seconds, not after minutes.
"""

from __future__ import annotations

import socket
import time

import pytest
from kio.schema.errors import ErrorCode

from bus.client.admin import (
    AdminClient,
    AdminError,
    ConfigSource,
    GroupIdNotFoundError,
    KafkaConnectionError,
    TopicAlreadyExistsError,
    TopicPartition,
    UnknownTopicOrPartitionError,
)
from bus.client.admin.client import _parse_bootstrap
from bus.client.admin.common import error_name, first_error
from bus.client.errors import KafkaError, KafkaTimeoutError
from bus.protocol.consumer_protocol import Assignment, assigned_partitions, encode_assignment
from contracts.ports import free_port


def test_error_names_are_kafkas() -> None:
    assert error_name(36) == "TOPIC_ALREADY_EXISTS"
    assert error_name(ErrorCode.group_id_not_found) == "GROUP_ID_NOT_FOUND"
    assert error_name(17) == "INVALID_TOPIC_EXCEPTION"
    assert error_name(9999) == "UNKNOWN_ERROR_CODE_9999"


def test_errors_map_to_specific_classes_and_carry_messages() -> None:
    exists = AdminError.of(ErrorCode.topic_already_exists, "Topic 'x' already exists.")
    assert isinstance(exists, TopicAlreadyExistsError) and isinstance(exists, KafkaError)
    assert exists.name == "TOPIC_ALREADY_EXISTS" and exists.code == 36
    assert str(exists) == "Topic 'x' already exists. (TOPIC_ALREADY_EXISTS)"
    assert isinstance(AdminError.of(3), UnknownTopicOrPartitionError)
    assert isinstance(AdminError.of(69), GroupIdNotFoundError)
    default = AdminError.of(ErrorCode.non_empty_group)
    assert default.message == "The group is not empty."
    assert AdminError.of(ErrorCode.not_coordinator).retriable
    assert not AdminError.of(ErrorCode.topic_already_exists).retriable


def test_client_timeouts_are_kafka_timeouts() -> None:
    from bus.client.admin import AdminTimeoutError

    late = AdminTimeoutError(ErrorCode.request_timed_out, "describe topics timed out")
    assert isinstance(late, KafkaTimeoutError) and late.name == "REQUEST_TIMED_OUT"


def test_first_error_carries_all_failures() -> None:
    a, b = AdminError.of(36), AdminError.of(37)
    first = first_error({"ok": None, "a": a, "b": b})
    assert first is a and first.errors == {"a": a, "b": b}
    assert first_error({"ok": None}) is None


@pytest.mark.parametrize("version", [0, 1, 3])
def test_consumer_assignment_round_trip(version: int) -> None:
    parts = [TopicPartition("a", 0), TopicPartition("a", 2), TopicPartition("bb", 1)]
    assert assigned_partitions(encode_assignment(Assignment(tuple(parts)), version)) == parts


def test_unreadable_assignment_is_no_partitions() -> None:
    assert assigned_partitions(b"") == []
    assert assigned_partitions(b"\x00\x00\x00\x00\x00\x05\x00") == []


def test_bootstrap_parsing() -> None:
    assert _parse_bootstrap("h1:9092, h2:19092") == [("h1", 9092), ("h2", 19092)]
    assert _parse_bootstrap(["[::1]:9092"]) == [("::1", 9092)]
    with pytest.raises(ValueError, match="host:port"):
        _parse_bootstrap("nohost")
    with pytest.raises(ValueError, match="no bootstrap"):
        _parse_bootstrap(" , ")
    with pytest.raises(ValueError, match=r"bootstrap\.servers is required"):
        AdminClient({})


def test_config_source_tolerates_unknown_ids() -> None:
    assert ConfigSource.of(1) is ConfigSource.DYNAMIC_TOPIC_CONFIG
    assert ConfigSource.of(42) is ConfigSource.UNKNOWN


def test_refused_connection_fails_at_once() -> None:
    port = free_port()
    started = time.monotonic()
    with pytest.raises(KafkaConnectionError, match=f"127.0.0.1:{port}"):
        AdminClient(bootstrap_servers=f"127.0.0.1:{port}")
    assert time.monotonic() - started < 2


def test_silent_server_fails_within_the_setup_timeout() -> None:
    """A listener that accepts TCP but never answers ApiVersions: bounded by the connection setup timeout."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        started = time.monotonic()
        with pytest.raises(KafkaConnectionError, match="could not reach any bootstrap server"):
            AdminClient({"bootstrap.servers": f"127.0.0.1:{port}", "socket.connection.setup.timeout.ms": 300})
        assert time.monotonic() - started < 3
