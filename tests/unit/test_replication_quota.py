"""Replication throttles without processes: the quota's sampled rate, the throttled-replica lists, and dynamic broker
configs committed through the controller into the image, its snapshot and a replay of the log."""

from __future__ import annotations

from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from bus.broker.replication_quota import ReplicationQuota, ReplicationQuotas
from bus.config.definitions import LONG_MAX, ConfigError
from bus.config.topic import throttled_partitions, validate_topic_configs
from bus.controller.controller import ControllerError, QuorumController, TopicSpec
from bus.controller.image import MetadataImage, snapshot_records
from bus.controller.metadata_log.local_file import MetadataLog
from bus.protocol.topic_partition import TopicPartition


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# -- the quota's rate (Kafka's Rate over replication.quota.window.num samples) ------------------------------------


def test_a_fresh_quota_spreads_its_first_bytes_over_all_but_one_window() -> None:
    clock = Clock()
    quota = ReplicationQuota(samples=11, window_s=1.0, rate=1000, clock=clock)
    quota.record(9_000)
    assert quota.measured_rate() == pytest.approx(900.0)  # 9000 bytes over (11 - 1) windows, not over 0 s
    assert not quota.is_quota_exceeded()
    quota.record(2_000)
    assert quota.measured_rate() == pytest.approx(1100.0)
    assert quota.is_quota_exceeded()


def test_the_rate_spans_the_samples_kept_and_old_samples_expire() -> None:
    clock = Clock()
    quota = ReplicationQuota(samples=2, window_s=1.0, rate=1000, clock=clock)
    quota.record(3_000)
    assert quota.is_quota_exceeded()  # 3000 bytes over at least one window
    clock.now += 1.5
    assert quota.measured_rate() == pytest.approx(2000.0)  # 3000 over the 1.5 s since the sample started
    assert quota.is_quota_exceeded()
    clock.now += 0.5  # the sample is samples x window old: it no longer counts
    assert quota.measured_rate() == 0.0
    assert not quota.is_quota_exceeded()
    quota.record(500)
    assert quota.measured_rate() == pytest.approx(500.0)


def test_an_unset_rate_is_never_exceeded() -> None:
    quota = ReplicationQuota(samples=2, window_s=1.0, clock=Clock())
    quota.record(10**12)
    assert quota.rate_limit == LONG_MAX and not quota.is_quota_exceeded()


def test_throttled_partitions_are_those_marked_or_all_of_the_topic() -> None:
    quota = ReplicationQuota()
    quota.mark_throttled("t", frozenset({0, 2}))
    quota.mark_throttled("all", None)
    assert quota.is_throttled(TopicPartition("t", 0)) and not quota.is_throttled(TopicPartition("t", 1))
    assert quota.is_throttled(TopicPartition("all", 7)) and not quota.is_throttled(TopicPartition("other", 0))
    quota.mark_throttled("t", frozenset())
    assert not quota.is_throttled(TopicPartition("t", 0))


# -- the throttled-replica lists (Kafka's ThrottledReplicaListValidator and parseThrottledPartitions) -------------


@pytest.mark.parametrize(("value", "broker", "partitions"), [
    ("*", 1, None),
    (" * ", 3, None),
    ("", 1, frozenset()),
    ("0:1,1:2,2:1", 1, frozenset({0, 2})),
    ("0:1 , 1:2", 2, frozenset({1})),
    ("0:1,1:2", 5, frozenset()),
])
def test_a_throttled_replica_list_names_the_partitions_of_one_broker(value: str, broker: int,
                                                                    partitions: frozenset[int] | None) -> None:
    assert throttled_partitions("leader.replication.throttled.replicas", value, broker) == partitions


@pytest.mark.parametrize("value", ["0-1", "a:1", "0:1,*", "0:1:2", "1", "-1:0"])
def test_a_malformed_throttled_replica_list_is_refused_with_kafkas_message(value: str) -> None:
    with pytest.raises(ConfigError, match=r"follower.replication.throttled.replicas must be the literal '\*' or a "
                                          r"list of replicas in the following format: \[partitionId\]:\[brokerId\]"):
        validate_topic_configs({"follower.replication.throttled.replicas": value})


def test_the_quotas_follow_the_dynamic_rates_most_specific_first_and_the_topic_lists() -> None:
    quotas = ReplicationQuotas(2, 11, 1.0, {"follower.replication.throttled.rate": "300"})
    assert (quotas.leader.rate_limit, quotas.follower.rate_limit) == (LONG_MAX, 300)
    quotas.update_rates({"": {"leader.replication.throttled.rate": "100", "follower.replication.throttled.rate": "200"},
                         "1": {"leader.replication.throttled.rate": "1"}})
    assert (quotas.leader.rate_limit, quotas.follower.rate_limit) == (100, 200)  # the default: broker 1 is not us
    quotas.update_rates({"": {"leader.replication.throttled.rate": "100"},
                         "2": {"leader.replication.throttled.rate": "50"}})
    assert (quotas.leader.rate_limit, quotas.follower.rate_limit) == (50, 300)  # our own, then the static file
    quotas.update_topic("t", {"leader.replication.throttled.replicas": "0:1,0:2",
                              "follower.replication.throttled.replicas": "1:2"})
    assert quotas.leader.is_throttled(TopicPartition("t", 0)) and not quotas.leader.is_throttled(TopicPartition("t", 1))
    assert quotas.follower.is_throttled(TopicPartition("t", 1))
    quotas.update_topic("t", {})
    assert not quotas.leader.is_throttled(TopicPartition("t", 0))


# -- dynamic broker configs through the controller ----------------------------------------------------------------


def _controller(directory: Path) -> QuorumController:
    return QuorumController(MetadataLog(directory), node_id=1, default_partitions=1, default_replication_factor=1)


def test_dynamic_broker_configs_are_committed_replayed_and_part_of_the_snapshot(tmp_path: Path) -> None:
    controller = _controller(tmp_path)
    controller.alter_broker_configs("1", {"leader.replication.throttled.rate": "1000",
                                          "follower.replication.throttled.rate": "2000"}, replace=False)
    controller.alter_broker_configs("", {"leader.replication.throttled.rate": "5"}, replace=False)
    controller.alter_broker_configs("1", {"follower.replication.throttled.rate": None}, replace=False)
    controller.alter_broker_configs("", {"leader.replication.throttled.rate": "7"}, replace=False, validate_only=True)
    expected = {"1": {"leader.replication.throttled.rate": "1000"}, "": {"leader.replication.throttled.rate": "5"}}
    assert controller.image.broker_configs == expected
    controller.create_topic(TopicSpec("t", 1, 1, configs={"leader.replication.throttled.replicas": "*"}))

    rebuilt = MetadataImage()
    for record in snapshot_records(controller.image):
        rebuilt.apply(record)
    assert rebuilt.broker_configs == expected
    assert rebuilt.topics["t"].configs == {"leader.replication.throttled.replicas": "*"}
    copied = controller.image.copy()  # what a snapshot is written from while the image moves on
    controller.alter_broker_configs("1", {"leader.replication.throttled.rate": "9"}, replace=False)
    assert copied.broker_configs == expected
    controller.alter_broker_configs("1", {"leader.replication.throttled.rate": "1000"}, replace=False)
    assert _controller(tmp_path).image.broker_configs == expected  # replayed from the log, as after a restart

    controller.alter_broker_configs("1", {}, replace=True)  # AlterConfigs: the whole set, here none
    assert controller.image.broker_configs == {"": {"leader.replication.throttled.rate": "5"}}


@pytest.mark.parametrize(("resource", "changes", "code", "message"), [
    ("1", {"log.retention.ms": "1", "num.partitions": "3"}, ErrorCode.invalid_request,
     "Cannot update these configs dynamically: [log.retention.ms, num.partitions]"),
    ("1", {"leader.replication.throttled.rate": "-1"}, ErrorCode.invalid_request,
     "Invalid value -1 for configuration leader.replication.throttled.rate: Value must be at least 0"),
    ("1", {"follower.replication.throttled.rate": "fast"}, ErrorCode.invalid_request, "not a valid long"),
    ("one", {"leader.replication.throttled.rate": "1"}, ErrorCode.invalid_request,
     "Broker id must be an integer, but it is: one"),
])
def test_bad_broker_config_changes_are_refused_and_change_nothing(tmp_path: Path, resource: str,
                                                                  changes: dict[str, str | None], code: ErrorCode,
                                                                  message: str) -> None:
    controller = _controller(tmp_path)
    with pytest.raises(ControllerError) as refused:
        controller.alter_broker_configs(resource, changes, replace=False)
    assert refused.value.code == code and message in refused.value.message
    assert controller.image.broker_configs == {}
