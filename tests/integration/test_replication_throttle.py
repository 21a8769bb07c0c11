"""Replication throttles on a three-node cluster of real processes (one cluster for the module).

`bus reassign-partitions --execute --throttle` moves a replica of a partition holding a few MB onto another broker:
the copy takes at least what its bytes over the rate allow (with margin for the quota's first windows), while an
acks=all producer keeps being acknowledged (the in-sync replicas are never throttled). Meanwhile DescribeConfigs
shows the throttled-replica lists and the rates; a resubmission with `--additional` changes the rate; `--verify`
reports the move complete and clears every throttle. The leader's quota alone, and the follower's alone, each hold a
copy to the rate. confluent-kafka's AdminClient judges dynamic broker configs: an
incremental_alter_configs on a BROKER resource (a broker and the cluster-wide default) comes back from
DescribeConfigs with its dynamic source and survives that broker's restart; a key that is not dynamic is refused.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)

from deploy.processes.cluster import ClusterProcess, started_cluster, until
from tests.integration._support_tools import bus, ok
from tests.integration.test_reassignment import everywhere
from tests.integration.test_replication import FAST, AckedProducer, all_in_sync

pytestmark = pytest.mark.slow

FETCH_MAX = 131072  # replica.fetch.max.bytes: the most one fetch can move past an exceeded quota
SETTINGS = {**FAST, "replication.quota.window.num": "2", "replica.fetch.max.bytes": str(FETCH_MAX)}
TIMEOUT = 30
RATES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
LISTS = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterProcess]:
    yield from started_cluster(tmp_path_factory.mktemp("throttle"), 3, SETTINGS)


def describe(cluster: ClusterProcess, kind: ResourceType, name: str) -> dict[str, ConfigEntry]:
    resource = ConfigResource(kind, name)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    # A few seconds, not the whole budget of the `until` around it: see `_refusal`.
    return admin.describe_configs([resource])[resource].result(10)  # type: ignore[no-any-return]


def fill(bootstrap: str, topic: str, total: int) -> None:
    """`total` bytes of incompressible values, acknowledged by every replica, in batches below FETCH_MAX: a fetch
    returns at least one whole batch, so a bigger one would pass the quota by more than `least_seconds` allows
    (librdkafka's batches reach 1 MB; a CI run moved 2 MB 10% faster than that bound)."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20, "batch.size": FETCH_MAX // 2})
    failures: list[str] = []
    for _ in range(total // 10_000):
        producer.produce(topic, os.urandom(10_000), partition=0,
                         on_delivery=lambda error, _msg: failures.append(str(error)) if error else None)
        producer.poll(0)
    assert producer.flush(60) == 0 and not failures, failures[:3]


def least_seconds(size: int, rate: int) -> float:
    """The shortest time a quota of `rate` over two 1 s windows lets `size` bytes through: in D seconds there are at
    most D / 2 + 1 spans of two windows, each passing 2 x rate plus the one fetch that finds the quota not yet
    exceeded, so size <= (D + 2) x rate + (D / 2 + 1) x FETCH_MAX."""
    return (size - 2 * rate - FETCH_MAX) / (rate + FETCH_MAX / 2)


def test_a_throttled_move_takes_bytes_over_rate_while_acks_all_goes_on(cluster: ClusterProcess,
                                                                       tmp_path: Path) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("throttled", 1, replica_assignment=[[1, 2]])])["throttled"].result(TIMEOUT)
    until(lambda: all_in_sync(cluster, "throttled", 1, 2), TIMEOUT, "throttled in sync")
    size, rate, faster = 3_000_000, 250_000, 300_000
    fill(cluster.bootstrap, "throttled", size)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": "throttled", "partition": 0,
                                                              "replicas": [1, 3]}]}))
    load = AckedProducer(cluster.bootstrap, "throttled", 1).start()

    started = time.monotonic()
    out = ok(bus("reassign-partitions", "--bootstrap-server", cluster.bootstrap, "--execute",
                 "--reassignment-json-file", str(plan), "--throttle", str(rate)))
    assert "Warning: You must run --verify periodically, until the reassignment completes, to ensure the throttle " \
           "is removed." in out
    assert f"The inter-broker throttle limit was set to {rate} B/s" in out
    assert "Successfully started partition reassignment for throttled-0" in out

    def throttled(expected: int) -> None:
        topic = describe(cluster, ResourceType.TOPIC, "throttled")
        # Leader side: every replica the copy may come from; follower side: the replica being added.
        assert (topic[LISTS[0]].value, topic[LISTS[1]].value) == ("0:1,0:2", "0:3")
        assert topic[LISTS[0]].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
        for broker in ("1", "2", "3"):  # each broker answers from its copy of the metadata
            configs = describe(cluster, ResourceType.BROKER, broker)
            assert [configs[key].value for key in RATES] == [str(expected)] * 2
            assert configs[RATES[0]].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value

    until(lambda: _quietly(lambda: throttled(rate)), TIMEOUT, "the throttles set")
    again = ok(bus("reassign-partitions", "--bootstrap-server", cluster.bootstrap, "--execute", "--additional",
                   "--reassignment-json-file", str(plan), "--throttle", str(faster)))
    assert f"The inter-broker throttle limit was set to {faster} B/s" in again
    until(lambda: _quietly(lambda: throttled(faster)), TIMEOUT, "the faster throttle set")

    def verified() -> str | None:
        out = ok(bus("reassign-partitions", "--bootstrap-server", cluster.bootstrap, "--verify",
                     "--reassignment-json-file", str(plan)))
        return out if "Reassignment of partition throttled-0 is completed." in out else None

    until(lambda: everywhere(cluster, "throttled", [1, 3]), 60, "the throttled move completed")
    elapsed = time.monotonic() - started
    print(f"throttled move of {size} bytes: {elapsed:.1f}s")
    done = until(verified, TIMEOUT, "--verify sees the move completed", interval=0.5)
    load.stop()
    lower = least_seconds(size, faster)  # unthrottled, 3 MB move here in about 3 s on a loaded machine
    assert elapsed >= lower, f"{size} bytes moved in {elapsed:.1f}s, faster than {faster} B/s allows ({lower:.1f}s)"
    assert not load.failed and load.count() > 0, load.failed[:3]
    assert "Clearing broker-level throttles on brokers 1,2,3" in done
    assert "Clearing topic-level throttles on topic throttled" in done

    def cleared() -> None:
        topic = describe(cluster, ResourceType.TOPIC, "throttled")
        assert [(topic[key].value, topic[key].source) for key in LISTS] == [("", ConfigSource.DEFAULT_CONFIG.value)] * 2
        for broker in ("1", "2", "3"):
            configs = describe(cluster, ResourceType.BROKER, broker)
            assert {configs[key].source for key in RATES} == {ConfigSource.DEFAULT_CONFIG.value}

    until(lambda: _quietly(cleared), TIMEOUT, "the throttles cleared")


@pytest.mark.parametrize(("side", "broker", "replicas"), [("leader", 1, "0:1"), ("follower", 3, "0:3")])
def test_each_side_alone_throttles_the_copy(cluster: ClusterProcess, tmp_path: Path, side: str, broker: int,
                                            replicas: str) -> None:
    """Only the leader's (or only the new follower's) quota set, with `bus configs`: the copy is still held to the
    rate, and `--verify --preserve-throttles` leaves the throttles in place."""
    topic, size, rate = f"one-side-{side}", 2_000_000, 200_000
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 1, replica_assignment=[[1, 2]])])[topic].result(TIMEOUT)
    until(lambda: all_in_sync(cluster, topic, 1, 2), TIMEOUT, f"{topic} in sync")
    fill(cluster.bootstrap, topic, size)
    key = f"{side}.replication.throttled"
    ok(bus("configs", "--bootstrap-server", cluster.bootstrap, "--topic", topic, "--alter",
           "--add-config", f"{key}.replicas={replicas}"))
    ok(bus("configs", "--bootstrap-server", cluster.bootstrap, "--broker", str(broker), "--alter",
           "--add-config", f"{key}.rate={rate}"))
    until(lambda: describe(cluster, ResourceType.BROKER, str(broker))[f"{key}.rate"].value == str(rate) or None,
          TIMEOUT, "the rate applied")
    plan = tmp_path / f"{topic}.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [1, 3]}]}))

    started = time.monotonic()
    ok(bus("reassign-partitions", "--bootstrap-server", cluster.bootstrap, "--execute",
           "--reassignment-json-file", str(plan)))

    def verified() -> str | None:
        out = ok(bus("reassign-partitions", "--bootstrap-server", cluster.bootstrap, "--verify",
                     "--preserve-throttles", "--reassignment-json-file", str(plan)))
        return out if f"Reassignment of partition {topic}-0 is completed." in out else None

    until(lambda: everywhere(cluster, topic, [1, 3]), 60, f"the move throttled on the {side} side completed")
    elapsed = time.monotonic() - started
    print(f"{side}-throttled move of {size} bytes: {elapsed:.1f}s")
    done = until(verified, TIMEOUT, "--verify sees the move completed", interval=0.5)
    lower = least_seconds(size, rate)
    assert elapsed >= lower, f"{size} bytes moved in {elapsed:.1f}s, faster than {rate} B/s allows ({lower:.1f}s)"
    assert "Clearing" not in done
    assert describe(cluster, ResourceType.TOPIC, topic)[f"{key}.replicas"].value == replicas
    ok(bus("configs", "--bootstrap-server", cluster.bootstrap, "--broker", str(broker), "--alter",
           "--delete-config", f"{key}.rate"))


def test_dynamic_broker_configs_round_trip_and_survive_a_restart(cluster: ClusterProcess) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    own = ConfigResource(ResourceType.BROKER, "2", incremental_configs=[
        ConfigEntry(RATES[1], "12345", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([own])[own].result(TIMEOUT)
    # librdkafka refuses an empty broker name: the cluster-wide default goes through `bus configs`.
    assert ok(bus("configs", "--bootstrap-server", cluster.bootstrap, "--entity-type", "brokers", "--entity-default",
                  "--alter", "--add-config", f"{RATES[0]}=777")) == \
        "Completed updating default config for brokers in the cluster.\n"

    def check() -> None:
        configs = describe(cluster, ResourceType.BROKER, "2")
        assert (configs[RATES[1]].value, configs[RATES[1]].source) == (
            "12345", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
        assert (configs[RATES[0]].value, configs[RATES[0]].source) == (
            "777", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
        assert not configs[RATES[0]].is_read_only and configs["log.dirs"].is_read_only
        assert describe(cluster, ResourceType.BROKER, "1")[RATES[1]].source == ConfigSource.DEFAULT_CONFIG.value

    until(lambda: _quietly(check), TIMEOUT, "broker 2 sees its dynamic configs")  # committed, then applied
    cluster[2].restart()
    cluster.wait_for_brokers()
    until(lambda: _quietly(check), TIMEOUT, "broker 2's dynamic configs after its restart", interval=0.5)

    static = ConfigResource(ResourceType.BROKER, "2", incremental_configs=[
        ConfigEntry("num.partitions", "3", incremental_operation=AlterConfigOpType.SET)])
    error = until(lambda: _refusal(cluster, static), TIMEOUT, "the static key refused by broker 2")
    assert error.code() == KafkaError.INVALID_REQUEST and "Cannot update these configs dynamically" in error.str()

    described = ok(bus("configs", "--bootstrap-server", cluster.bootstrap, "--entity-type", "brokers",
                       "--entity-default", "--describe"))
    assert described.splitlines() == ["Default configs for brokers in the cluster are:",
                                      f"  {RATES[0]}=777 sensitive=false "
                                      f"synonyms={{DYNAMIC_DEFAULT_BROKER_CONFIG:{RATES[0]}=777, "
                                      f"DEFAULT_CONFIG:{RATES[0]}=9223372036854775807}}"]
    ok(bus("configs", "--bootstrap-server", cluster.bootstrap, "--entity-type", "brokers", "--entity-default",
           "--alter", "--delete-config", RATES[0]))
    ok(bus("configs", "--bootstrap-server", cluster.bootstrap, "--entity-type", "brokers", "--entity-name", "2",
           "--alter", "--delete-config", RATES[1]))
    until(lambda: describe(cluster, ResourceType.BROKER, "2")[RATES[1]].source == ConfigSource.DEFAULT_CONFIG.value
          or None, TIMEOUT, "broker 2's throttle removed")


def _refusal(cluster: ClusterProcess, resource: ConfigResource) -> KafkaError | None:
    """The error an IncrementalAlterConfigs of `resource` gets, from a new client; None if it got no answer in time.

    librdkafka sends a broker's configs to that broker, and a client whose metadata lacks the broker when the
    request starts never connects to it, even once a later metadata names it: a node that has not yet applied a
    just-restarted broker's registration (fenced by its controlled shutdown, as Kafka fences it) answers that
    metadata, so the request is tried again, as a user would, with a new client."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    try:
        admin.incremental_alter_configs([resource])[resource].result(5)
    except KafkaException as exc:
        return exc.args[0]  # type: ignore[no-any-return]
    except TimeoutError:
        return None
    raise AssertionError("a static broker config was altered")


def _quietly(check: Callable[[], None]) -> bool | None:
    """True once `check()` passes; None while it still fails (a broker applying the change, or restarting, or a
    request that got no answer: see `_refusal`)."""
    try:
        check()
    except (AssertionError, KafkaException, TimeoutError):
        return None
    return True
