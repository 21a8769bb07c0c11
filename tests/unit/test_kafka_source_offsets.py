"""The bus source's offset logic without a broker: JSON order, rate limits, planning, data loss."""

from __future__ import annotations

import json
import pickle

import pytest

from spark_jobs import offsets as off
from spark_jobs.kafka_source import BusKafkaStreamReader, SourceOptions


def test_offsets_json_has_a_stable_order() -> None:
    offsets = {("b", 10): 5, ("a", 2): 1, ("b", 2): 7, ("a", 0): 3}
    text = json.dumps(off.to_json(offsets))
    assert text == '{"a": {"0": 3, "2": 1}, "b": {"2": 7, "10": 5}}'
    assert off.from_json(json.loads(text)) == offsets
    assert json.dumps(off.to_json(dict(reversed(list(offsets.items()))))) == text


def test_starting_offsets() -> None:
    marks = {("t", 0): (5, 20), ("t", 1): (0, 7)}
    assert off.resolve_starting(off.parse_starting("earliest"), marks) == {("t", 0): 5, ("t", 1): 0}
    assert off.resolve_starting(off.parse_starting(" LATEST "), marks) == {("t", 0): 20, ("t", 1): 7}
    spec = off.parse_starting('{"t": {"0": 11}}')
    assert off.resolve_starting(spec, marks) == {("t", 0): 11, ("t", 1): 0}  # unnamed: earliest
    assert off.resolve_starting(off.parse_starting('{"t": {"0": -1, "1": -2}}'), marks) == {("t", 0): 20, ("t", 1): 0}
    with pytest.raises(ValueError, match="do not exist"):
        off.resolve_starting(off.parse_starting('{"t": {"9": 0}}'), marks)
    with pytest.raises(ValueError, match="startingOffsets"):
        off.parse_starting("yesterday")


def test_latest_takes_everything_without_a_limit_and_new_partitions_from_earliest() -> None:
    start = {("t", 0): 10}
    marks = {("t", 0): (0, 50), ("t", 1): (3, 9)}
    assert off.latest(start, marks, None) == {("t", 0): 50, ("t", 1): 9}


def test_max_offsets_are_spread_by_backlog_without_starving_small_partitions() -> None:
    start = {("t", 0): 0, ("t", 1): 0, ("t", 2): 0}
    marks = {("t", 0): (0, 900), ("t", 1): (0, 100), ("t", 2): (0, 1)}
    end = off.latest(start, marks, 100)
    assert end == {("t", 0): 89, ("t", 1): 9, ("t", 2): 1}
    assert sum(end.values()) <= 100
    assert off.latest(start, marks, 5000) == {tp: high for tp, (_, high) in marks.items()}


def test_available_now_target_caps_the_end() -> None:
    start = {("t", 0): 0}
    marks = {("t", 0): (0, 100), ("t", 1): (0, 40)}
    target = {("t", 0): 60}
    assert off.latest(start, marks, None, target) == {("t", 0): 60, ("t", 1): 0}  # t-1 appeared later
    assert off.latest({("t", 0): 60, ("t", 1): 0}, marks, None, target) == {("t", 0): 60, ("t", 1): 0}


def test_plan_one_range_per_partition_and_min_partitions_splits() -> None:
    start = {("a", 0): 0, ("a", 1): 10, ("b", 0): 5}
    end = {("a", 0): 100, ("a", 1): 10, ("b", 0): 25}
    ranges = off.plan(start, end)
    assert ranges == [off.Range("a", 0, 0, 100), off.Range("b", 0, 5, 25)]
    split = off.plan(start, end, min_partitions=6)
    assert sum(r.size for r in split) == 120
    assert [r for r in split if r.topic == "a"] == [off.Range("a", 0, i * 20, i * 20 + 20) for i in range(5)]
    assert [r for r in split if r.topic == "b"] == [off.Range("b", 0, 5, 25)]
    assert off.plan(start, end, min_partitions=2) == ranges


def test_progress_checks_report_data_loss() -> None:
    marks = {("t", 0): (0, 10)}
    assert off.check_progress({("t", 0): 4}, marks, True) == {("t", 0): 4}
    with pytest.raises(off.DataLossError, match="went back"):
        off.check_progress({("t", 0): 30}, marks, True)
    assert off.check_progress({("t", 0): 30}, marks, False) == {("t", 0): 0}
    with pytest.raises(off.DataLossError, match="is gone"):
        off.check_progress({("t", 0): 4, ("t", 1): 2}, marks, True)
    assert off.check_progress({("t", 0): 4, ("t", 1): 2}, marks, False) == {("t", 0): 4}


def test_options_follow_spark_names() -> None:
    options = SourceOptions.parse({
        "kafka.bootstrap.servers": "h:1", "subscribe": "a, b", "startingOffsets": "earliest",
        "maxOffsetsPerTrigger": "500", "failOnDataLoss": "false", "minPartitions": "4",
        "kafka.fetch.max.bytes": "1048576", "kafka.group.id": "g", "includeHeaders": "true",
    })
    assert options.subscribe == ("a", "b")
    assert options.starting == "earliest"
    assert options.max_offsets_per_trigger == 500
    assert options.fail_on_data_loss is False
    assert options.min_partitions == 4 and options.include_headers
    settings = options.consumer_settings()
    assert settings["fetch.max.bytes"] == "1048576" and settings["group.id"] == "g"
    assert settings["enable.auto.commit"] is False
    assigned = SourceOptions.parse({"kafka.bootstrap.servers": "h:1", "assign": '{"t": [1, 0]}'})
    assert assigned.assign == (("t", 0), ("t", 1)) and assigned.starting == "latest"


@pytest.mark.parametrize("options", [
    {"subscribe": "a"},
    {"kafka.bootstrap.servers": "h:1"},
    {"kafka.bootstrap.servers": "h:1", "subscribe": "a", "subscribePattern": "a.*"},
    {"kafka.bootstrap.servers": "h:1", "assign": "[0]"},
    {"kafka.bootstrap.servers": "h:1", "subscribe": "a", "maxOffsetsPerTrigger": "0"},
    {"kafka.bootstrap.servers": "h:1", "subscribe": "a", "failOnDataLoss": "maybe"},
])
def test_bad_options_are_refused(options: dict[str, str]) -> None:
    with pytest.raises(ValueError):
        SourceOptions.parse(options)


def test_reader_pickles_without_its_driver_connection() -> None:
    reader = BusKafkaStreamReader(SourceOptions.parse({"kafka.bootstrap.servers": "h:1", "subscribe": "a"}))
    reader._metadata = object()  # stands for a live client, which cannot be pickled
    clone = pickle.loads(pickle.dumps(reader))
    assert clone._metadata is None and clone.options == reader.options
