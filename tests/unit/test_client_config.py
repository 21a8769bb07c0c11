"""Client config: Java names and defaults, validation, and the idempotence rules of KIP-679."""

from __future__ import annotations

import pytest

from bus.client.config import bootstrap_addresses, consumer_config, producer_config
from bus.client.errors import ConfigError


def test_producer_defaults_are_javas() -> None:
    cfg = producer_config({"bootstrap.servers": "h:1"})
    assert cfg["acks"] == -1 and cfg["enable.idempotence"] is True
    assert cfg["batch.size"] == 16384 and cfg["buffer.memory"] == 33554432
    assert cfg["max.block.ms"] == 60000 and cfg["delivery.timeout.ms"] == 120000
    assert cfg["max.in.flight.requests.per.connection"] == 5 and cfg["retries"] == 2**31 - 1


def test_strings_and_underscored_keywords_are_accepted() -> None:
    cfg = producer_config({"linger.ms": "20", "enable.idempotence": "false"}, bootstrap_servers="h:1", acks="1")
    assert cfg["linger.ms"] == 20 and cfg["enable.idempotence"] is False and cfg["acks"] == 1


def test_implicit_idempotence_yields_to_conflicting_configs() -> None:
    assert producer_config(bootstrap_servers="h:1", acks="1")["enable.idempotence"] is False
    with pytest.raises(ConfigError, match="acks must be all"):
        producer_config(bootstrap_servers="h:1", acks="1", enable_idempotence=True)
    with pytest.raises(ConfigError, match=r"max.in.flight"):
        producer_config({"bootstrap.servers": "h:1", "enable.idempotence": True,
                         "max.in.flight.requests.per.connection": 6})


def test_bad_values_name_the_key() -> None:
    with pytest.raises(ConfigError, match=r"compression.type"):
        producer_config(bootstrap_servers="h:1", compression_type="brotli")
    with pytest.raises(ConfigError, match=r"linger.ms"):
        producer_config(bootstrap_servers="h:1", linger_ms=-1)
    with pytest.raises(ConfigError, match=r"batch.size"):
        producer_config(bootstrap_servers="h:1", batch_size="big")
    with pytest.raises(ConfigError, match=r"bootstrap.servers"):
        producer_config({})


def test_delivery_timeout_must_cover_linger_and_request_timeout() -> None:
    assert producer_config(bootstrap_servers="h:1", request_timeout_ms=1000, linger_ms=0)["delivery.timeout.ms"] \
        == 120000
    assert producer_config(bootstrap_servers="h:1", request_timeout_ms=200000)["delivery.timeout.ms"] == 200005
    with pytest.raises(ConfigError, match=r"delivery.timeout.ms"):
        producer_config(bootstrap_servers="h:1", delivery_timeout_ms=1000, request_timeout_ms=5000)


def test_consumer_defaults_and_checks() -> None:
    cfg = consumer_config(bootstrap_servers="h:1")
    assert cfg["max.poll.records"] == 500 and cfg["auto.offset.reset"] == "latest"
    assert cfg["partition.assignment.strategy"] == ("range", "cooperative-sticky")
    assert consumer_config(bootstrap_servers="h:1", partition_assignment_strategy="roundrobin")[
        "partition.assignment.strategy"] == ("roundrobin",)
    with pytest.raises(ConfigError, match="heartbeat"):
        consumer_config(bootstrap_servers="h:1", heartbeat_interval_ms=50000)
    with pytest.raises(ConfigError, match=r"isolation.level"):
        consumer_config(bootstrap_servers="h:1", isolation_level="serializable")


def test_bootstrap_addresses() -> None:
    assert bootstrap_addresses(["a:1", " b:2 ", "c", "[::1]:9093", "PLAINTEXT://d:4"]) == [
        ("a", 1), ("b", 2), ("c", 9092), ("::1", 9093), ("d", 4)]
    with pytest.raises(ConfigError):
        bootstrap_addresses(["a:port"])
