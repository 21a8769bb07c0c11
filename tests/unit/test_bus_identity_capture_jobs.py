"""The capture side and the Spark jobs reach the bus as their own principal: ``simulator``, ``capture-ingest``,
``video-ingest`` (or the one ``--bus-principal`` names), with the settings of ``[bus] client_properties_dir``;
without that key, PLAINTEXT to the bootstrap servers. No broker: the clients are caught where they are built."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from contracts import bus_client
from contracts.config import load
from contracts.video import ANALYZE, VideoCommand
from ingest import producer as producer_module
from ingest import simulate
from spark_jobs import capture_writer, ingest_captures, launch, video_ingest, video_synopsis
from spark_jobs.kafka_source import OffsetRangePartition, SourceOptions, bus_settings
from spark_jobs.offsets import Range

PLAIN = "plain:9092"
SECURED = "secure:9094"


class Caught(Exception):
    """Stops a job's main once the client under test was built."""


def secured_config(tmp_path: Path, *principals: str) -> Path:
    """A solution config naming a properties directory with a SASL_SSL file (mode 0600) for each principal."""
    directory = tmp_path / "bus-clients"
    directory.mkdir()
    for principal in principals:
        path = bus_client.properties_file(directory, principal)
        path.write_text(
            f"bootstrap.servers={SECURED}\n"
            "security.protocol=SASL_SSL\n"
            "sasl.mechanism=SCRAM-SHA-512\n"
            "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{principal}" password="pw";\n'
            "ssl.truststore.type=PEM\n"
            "ssl.truststore.location=/abs/ca.pem\n")
        path.chmod(0o600)
    config = tmp_path / "secured.toml"
    config.write_text(f'[bus]\nbootstrap_servers = "{SECURED}"\nclient_properties_dir = "{directory}"\n')
    return config


def plain_config(tmp_path: Path) -> Path:
    config = tmp_path / "plain.toml"
    config.write_text(f'[bus]\nbootstrap_servers = "{PLAIN}"\n')
    return config


def login(principal: str, bootstrap: str = SECURED) -> dict[str, str]:
    """What librdkafka gets for ``principal`` from :func:`secured_config`."""
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": principal, "sasl.password": "pw", "ssl.ca.location": "/abs/ca.pem"}


def catch(monkeypatch: pytest.MonkeyPatch, module: Any, name: str, index: int = 0) -> list[Any]:
    """Replace ``module.name`` (what builds a client) by one that records its argument ``index`` and stops."""
    seen: list[Any] = []

    def build(*args: Any, **_kwargs: Any) -> Any:
        seen.append(args[index])
        raise Caught

    monkeypatch.setattr(module, name, build)
    return seen


# -- simulator -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("secured", [True, False])
def test_simulator_produces_as_simulator(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, secured: bool) -> None:
    config = secured_config(tmp_path, "simulator") if secured else plain_config(tmp_path)
    seen = catch(monkeypatch, simulate, "open_producer")
    with pytest.raises(Caught):
        simulate.main(["--config", str(config), "--map", str(tmp_path / "map.json"), "--count", "1"])
    assert seen == [login("simulator") if secured else {"bootstrap.servers": PLAIN}]
    seen.clear()
    with pytest.raises(Caught):  # the flag replaces the address only
        simulate.main(["--config", str(config), "--map", str(tmp_path / "map.json"), "--bootstrap-server", "b:1"])
    assert seen == [login("simulator", "b:1") if secured else {"bootstrap.servers": "b:1"}]


def test_record_producer_and_its_admin_use_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    import confluent_kafka
    import confluent_kafka.admin

    built: list[dict[str, Any]] = []
    monkeypatch.setattr(confluent_kafka, "Producer", lambda conf: built.append(conf))
    seen = catch(monkeypatch, confluent_kafka.admin, "AdminClient")
    producer = producer_module.open_producer(login("simulator"), {"client.id": "x"})
    with pytest.raises(Caught):
        producer.ensure_topics({"t": 1})
    assert built[0] == {**built[0], **login("simulator"), "client.id": "x", "acks": "all"}
    assert seen == [{**login("simulator"), "log_level": 3}]
    producer_module.open_producer(PLAIN)  # a bare address: PLAINTEXT (tests, the DR site)
    assert built[1]["bootstrap.servers"] == PLAIN and "security.protocol" not in built[1]


# -- capture-ingest ------------------------------------------------------------------------------------------
def test_bus_source_turns_spark_options_into_librdkafka_settings(tmp_path: Path) -> None:
    options = bus_client.spark_options(load(secured_config(tmp_path, "capture-ingest")), "capture-ingest")
    assert options["kafka.sasl.jaas.config"].endswith('password="pw";')
    source = SourceOptions.parse({**options, "subscribe": "capture.vehicle", "kafka.fetch.max.bytes": "1024"})
    settings = source.consumer_settings()
    assert settings == {**settings, **login("capture-ingest"), "fetch.max.bytes": "1024"}
    assert not {"sasl.jaas.config", "ssl.truststore.location", "ssl.truststore.type"} & set(settings)
    assert "pw" not in repr(source) and "pw" not in repr(OffsetRangePartition(Range("t", 0, 0, 1), source))
    assert bus_settings(options) == login("capture-ingest")
    plain = SourceOptions.parse({"kafka.bootstrap.servers": PLAIN, "subscribe": "t"}).consumer_settings()
    assert plain["bootstrap.servers"] == PLAIN and "security.protocol" not in plain


@pytest.mark.parametrize("principal", [None, "dr-loaders"])
def test_ingest_job_clients_get_its_principal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              principal: str | None) -> None:
    config = secured_config(tmp_path, "capture-ingest", "dr-loaders")
    expected = login(principal or "capture-ingest")
    seen = catch(monkeypatch, ingest_captures, "prepare_sinks", 1)
    monkeypatch.setattr(ingest_captures, "setup_logs", lambda *_: None)
    with pytest.raises(Caught):
        ingest_captures.main(["--config", str(config), *(["--bus-principal", principal] if principal else [])])
    assert seen == [expected]
    args, _ = ingest_captures.parse_args(["--config", str(config)])
    writer = ingest_captures.writer_settings(args, seen[0])
    assert "pw" not in repr(writer)
    producers = catch(monkeypatch, capture_writer, "open_producer")
    monkeypatch.setattr(capture_writer, "_PRODUCERS", {})
    with pytest.raises(Caught):  # the dead-letter producer on the executors
        capture_writer.send_deadletters([("capture.vehicle", b"{}")], writer)
    assert producers == [expected]


def test_ingest_job_source_gets_spark_options(tmp_path: Path) -> None:
    config = load(secured_config(tmp_path, "capture-ingest"))
    args, _ = ingest_captures.parse_args(["--config", str(config.path), "--source-format", "kafka"])
    given: dict[str, str] = {}

    class Reader:
        def format(self, _name: str) -> Reader:
            return self

        def options(self, **options: str) -> Reader:
            given.update(options)
            return self

        def option(self, key: str, value: str) -> Reader:
            given[key] = value
            return self

        def load(self) -> None:
            return None

    spark = argparse.Namespace(readStream=Reader())
    ingest_captures.source(spark, args, bus_client.spark_options(config, args.bus_principal, args.bootstrap_server))
    assert given["kafka.security.protocol"] == "SASL_SSL" and given["kafka.bootstrap.servers"] == SECURED
    assert 'username="capture-ingest"' in given["kafka.sasl.jaas.config"]


def test_unknown_principal_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        ingest_captures.parse_args(["--config", str(plain_config(tmp_path)), "--bus-principal", "nobody"])


# -- video-ingest --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("secured", [True, False])
def test_video_ingest_publishes_as_video_ingest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                secured: bool) -> None:
    config = secured_config(tmp_path, "video-ingest") if secured else plain_config(tmp_path)
    seen = catch(monkeypatch, video_ingest, "TaskPublisher")
    monkeypatch.setattr(video_ingest, "setup_logs", lambda *_: None)
    with pytest.raises(Caught):
        video_ingest.main(["--config", str(config), "--loader-only", "--checkpoint", str(tmp_path / "ckpt")])
    assert seen == [login("video-ingest") if secured else {"bootstrap.servers": PLAIN}]


def test_batch_jobs_get_the_config_not_the_login(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = secured_config(tmp_path, "video-ingest")
    args, _ = video_ingest.parse_args(["--config", str(config), "--loader-only", "--jobs-dir", str(tmp_path)])
    argv: list[str] = []
    monkeypatch.setattr(launch, "submit", lambda _job, job_args, *_a, **_k: argv.extend(job_args))
    command = VideoCommand("t1", ANALYZE, "s3://videos/a.mp4", "cam-1", "op", "2024-05-01T08:00:00+00:00")
    video_ingest.batch_launcher(args, launch.SparkSettings(cds_archive=None))(command, 1)
    assert argv[argv.index("--config") + 1] == str(config)
    assert argv[argv.index("--bus-principal") + 1] == "video-ingest"
    assert not any("pw" in arg or "jaas" in arg for arg in argv)
    seen = catch(monkeypatch, video_synopsis, "TaskPublisher")
    with pytest.raises(Caught):  # the batch job reads its settings from that config
        video_synopsis.main(argv)
    assert seen == [login("video-ingest", args.bootstrap_server)]
