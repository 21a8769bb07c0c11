"""The contracts package: one source for topic names, the deployment map and the config loader."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from confluent_kafka import KafkaError

from contracts import config as solution
from contracts.deployment_map import DeploymentMap, MapError, map_path
from contracts.ingest_stats import BatchTally, StatsError, merge_latency, parse_stats, stats_record
from contracts.records import Kind, is_checkpoint_id, is_plate
from contracts.topics import NEW_TOPIC_ERRORS, Topics, partitions
from ingest.city import build_city

ROOT = Path(__file__).resolve().parents[2]


def test_shipped_config_names_every_topic_with_its_default() -> None:
    """The TOML and the dataclass agree, so nobody reads a name the other does not know."""
    assert Topics.from_config(solution.load()) == Topics()
    assert partitions(solution.load()) == 2


def test_new_topic_errors_are_the_codes_clients_name() -> None:
    """The contract spells Kafka's codes as numbers (no client library in contracts); they must be the ones
    confluent-kafka reports for a topic not yet applied everywhere."""
    clients = {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.LEADER_NOT_AVAILABLE, KafkaError.NOT_LEADER_FOR_PARTITION}
    assert clients == NEW_TOPIC_ERRORS


def test_topics_split_data_from_control() -> None:
    topics = Topics()
    assert set(topics.control()) == {"video.commands"}
    # the watchlists and statistics (compacted commands) reach the DR site, whose surveillance takes over with them
    assert {"control.watchlist", "control.stats"} <= set(topics.data())
    assert set(topics.commands()) == {"video.commands", "control.watchlist", "control.stats"}  # commands all the same
    assert "capture.vehicle" in topics.data() and "alerts" in topics.data() and "audit" in topics.data()
    assert not set(topics.data()) & set(topics.control())
    assert topics.kind_of("capture.face") is Kind.FACE and topics.kind_of("alerts") is None
    assert topics.of_kind(Kind.VEHICLE) == "capture.vehicle"


def test_renamed_topics_and_bad_names(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text('[topics]\nalerts = "city.alerts"\npartitions = 6\n')
    cfg = solution.load(path)
    assert Topics.from_config(cfg).alerts == "city.alerts" and partitions(cfg) == 6
    path.write_text('[topics]\nalerts = ""\npartitions = 0\n')
    with pytest.raises(ValueError, match=r"topics\.alerts"):
        Topics.from_config(solution.load(path))
    with pytest.raises(ValueError, match=r"topics\.partitions"):
        partitions(solution.load(path))


def test_deployment_map_round_trip(tmp_path: Path) -> None:
    city = build_city(5, 12)
    path = tmp_path / "map.json"
    city.save(path)
    loaded = DeploymentMap.load(path)
    assert loaded == city.deployment_map()
    assert {d.device_ip for d in loaded.devices} == set(city.devices)


def test_deployment_map_errors_are_clear(tmp_path: Path) -> None:
    with pytest.raises(MapError, match="not found"):
        DeploymentMap.load(tmp_path / "absent.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(MapError, match="cannot read"):
        DeploymentMap.load(tmp_path / "bad.json")
    (tmp_path / "shape.json").write_text('{"districts": []}')
    with pytest.raises(MapError, match="not a deployment map"):
        DeploymentMap.load(tmp_path / "shape.json")


def test_map_path_comes_from_the_config(tmp_path: Path) -> None:
    assert map_path(solution.load()) == Path("data/deployment_map.json")
    path = tmp_path / "s.toml"
    path.write_text('[map]\npath = "/srv/map.json"\n')
    assert map_path(solution.load(path)) == Path("/srv/map.json")


def test_search_inputs_are_checked_against_the_record_schema() -> None:
    assert is_plate("浙AWL999") and is_plate("浙AD12345")
    assert not is_plate("<b>浙A</b>") and not is_plate("AWL999")
    assert is_checkpoint_id("110110#1#0#0") and not is_checkpoint_id("110110#1#0")


def test_contracts_import_no_other_package() -> None:
    """contracts/ is what the others agree on: it may import only the standard library, itself and two of Kafka's
    file formats the bus package parses (client properties files, JAAS lines), never a client, server or service."""
    ours = {"bus", "ingest", "spark_jobs", "video", "deploy", "web", "monitoring", "surveillance", "dr_mirror"}
    formats = {"bus.config.properties", "bus.security.jaas"}
    for path in (ROOT / "contracts").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
            assert not {n.split(".")[0] for n in names if n not in formats} & ours, f"{path} imports {names}"


def test_latency_histograms_merge_across_batches_without_losing_percentiles() -> None:
    """What the monitor does per minute and hour: decode each batch's histogram and add them up."""
    fast, slow = BatchTally(), BatchTally()
    fast.latency["capture_to_ingest"].update({100: 990})
    slow.latency["capture_to_ingest"].update({5000: 10})
    parsed = [parse_stats(json.dumps(stats_record("job", n, "2026-11-23T08:00:00.000+08:00", 1.0, 0.2, t)))
              for n, t in enumerate((fast, slow))]
    merged = merge_latency(parsed, "capture_to_ingest")
    assert merged.count == 1000
    assert merged.percentile(50) == 100 and 4950 <= merged.percentile(99.5) <= 5050


def test_malformed_stats_records_are_refused_with_a_reason() -> None:
    for raw in (None, b"[]", b"{not json", b'{"job": "x"}', json.dumps({
            "job": "x", "batch_id": 1, "time": "t", "window_s": 1, "read": 1, "valid": 1, "unrecognized": 0,
            "invalid": 0, "rows_written": 1, "latency_ms": {"capture_to_ingest": {"hdr": "!!"}}, "devices": []})):
        with pytest.raises(StatsError):
            parse_stats(raw)
