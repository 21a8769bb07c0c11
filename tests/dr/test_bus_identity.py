"""The mirror's bus identity: its clients of both buses take the `mirror` principal's settings of that site (MM2's
`primary.*` and `dr.*` cluster keys written by deploy/dr_site.py), and the passwords never leave an owner-only file
(no repr, no world-readable properties)."""

from __future__ import annotations

import stat
import threading
from pathlib import Path
from typing import Any

import pytest

from bus.client.errors import ConfigError
from bus.client.security import PLAINTEXT, ClientSecurity
from contracts.config import Config
from deploy.dr_site import DrSettings, mirror_properties, mirror_service
from dr_mirror import checkpoints, mirror, syncs, worker
from dr_mirror.metrics import MirrorMetrics
from dr_mirror.mirror import Mirror
from dr_mirror.settings import Settings, SettingsError, defaults_from, from_legacy_flags, from_properties, load
from dr_mirror.syncs import SyncStore
from dr_mirror.worker import Registry, Worker

JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="mirror" password="pw";'
SECURED = {"bootstrap.servers": "primary:9094", "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
           "sasl.jaas.config": JAAS, "ssl.truststore.type": "PEM", "ssl.truststore.location": "/abs/ca.pem"}


DR_SECURED = {**SECURED, "bootstrap.servers": "dr:19094", "sasl.jaas.config": JAAS.replace('"pw"', '"dr-pw"')}
"""The mirror's settings at the DR site: its own password there, the same CA."""


def _config(tmp_path: Path, secured: bool) -> Config:
    sections: dict[str, dict[str, Any]] = {"bus": {"bootstrap_servers": "primary:9092"},
                                           "dr": {"bootstrap_servers": "dr:19092"}}
    for section, settings in (("bus", SECURED), ("dr", DR_SECURED)) if secured else ():
        directory = tmp_path / f"{section}-clients"
        directory.mkdir()
        file = directory / "mirror.properties"
        file.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
        file.chmod(0o600)
        sections[section]["client_properties_dir"] = str(directory)
    return Config(sections)


def _mirror_settings(tmp_path: Path, secured: bool, primary: str = "primary:9094") -> tuple[Path, Settings]:
    config = _config(tmp_path, secured)
    _name, command, _where = mirror_service(config, DrSettings.from_config(config, tmp_path / "data"), primary)
    props = Path(command[command.index("--config") + 1])
    return props, load(props, {})


def test_the_generated_properties_carry_the_mirror_principal_for_the_primary_only(tmp_path: Path) -> None:
    props, settings = _mirror_settings(tmp_path, secured=True)
    assert stat.S_IMODE(props.stat().st_mode) == 0o600
    text = props.read_text()
    assert "primary.security.protocol = SASL_SSL" in text and "primary.sasl.mechanism = SCRAM-SHA-512" in text
    assert f"primary.sasl.jaas.config = {JAAS}" in text and "primary.ssl.truststore.location = /abs/ca.pem" in text
    assert "dr.security.protocol = SASL_SSL" in text
    assert f"dr.sasl.jaas.config = {DR_SECURED['sasl.jaas.config']}" in text
    assert settings.source_cluster == SECURED
    assert settings.target_cluster == {**DR_SECURED, "bootstrap.servers": "dr:19092"}  # make up's [dr] address
    assert "pw" not in repr(settings) and "jaas" not in repr(settings)


def test_the_bootstrap_given_by_make_up_overrides_the_address_only(tmp_path: Path) -> None:
    _props, settings = _mirror_settings(tmp_path, secured=True, primary="elsewhere:1")
    assert settings.source_cluster == {**SECURED, "bootstrap.servers": "elsewhere:1"}


def test_a_plaintext_solution_gives_bare_bootstraps(tmp_path: Path) -> None:
    props, settings = _mirror_settings(tmp_path, secured=False, primary="primary:9092")
    assert "security.protocol" not in props.read_text()
    assert (settings.source_cluster, settings.target_cluster) == ({"bootstrap.servers": "primary:9092"},
                                                                  {"bootstrap.servers": "dr:19092"})


def test_a_drill_site_stays_plaintext_whatever_the_solution_config(tmp_path: Path) -> None:
    """The drill writes its throw-away sites' properties from their bootstraps alone."""
    text = mirror_properties("p:1", "d:2", _config(tmp_path, secured=True))
    assert "primary.bootstrap.servers = p:1" in text and "security" not in text and "sasl" not in text


def test_a_password_with_a_backslash_survives_the_properties_file(tmp_path: Path) -> None:
    jaas = JAAS.replace('"pw"', '"p\\\\w"')  # a password p\w, as a JAAS entry escapes it
    (tmp_path / "mm2.properties").write_text(mirror_properties({**SECURED, "sasl.jaas.config": jaas}, "d:2",
                                                               Config({})))
    (tmp_path / "mm2.properties").chmod(0o600)
    assert load(tmp_path / "mm2.properties", {}).source_cluster["sasl.jaas.config"] == jaas


def test_properties_holding_a_secret_open_to_others_stop_the_mirror(tmp_path: Path) -> None:
    props, _settings = _mirror_settings(tmp_path, secured=True)
    props.chmod(0o640)
    with pytest.raises(SettingsError, match=r"(primary|dr)\.sasl\.jaas\.config") as raised:
        load(props, {})
    assert "pw" not in str(raised.value)


def test_cluster_keys_apply_to_every_client_of_their_cluster_and_only_theirs() -> None:
    props = {"clusters": "primary, dr", "primary->dr.enabled": "true", "dr.bootstrap.servers": "dr:1",
             **{f"primary.{key}": value for key, value in SECURED.items()},
             "primary.consumer.fetch.min.bytes": "10", "primary.consumer.ssl.keystore.type": "PEM"}
    settings = from_properties(props, {"topics": "x", "topics.exclude": "y"})
    assert settings.source_cluster == SECURED  # `primary.consumer.*` tunes the consumer, not the cluster
    assert settings.target_cluster == {"bootstrap.servers": "dr:1"}
    assert settings.consumer_int("fetch.min.bytes", 1) == 10


def test_the_legacy_flags_reach_the_bus_as_the_mirror_principal(tmp_path: Path) -> None:
    defaults = defaults_from(_config(tmp_path, secured=True))
    settings = from_legacy_flags(consumer_config=None, producer_config=None, include=None, exclude=None, streams=1,
                                 solution_defaults=defaults)
    assert settings.source_cluster == SECURED
    assert settings.target_cluster == DR_SECURED
    consumer = tmp_path / "consumer.properties"
    consumer.write_text("bootstrap.servers=other:1\nfetch.min.bytes=5\n")
    settings = from_legacy_flags(consumer_config=consumer, producer_config=None, include=None, exclude=None,
                                 streams=1, solution_defaults=defaults)
    assert settings.source_cluster == {**SECURED, "bootstrap.servers": "other:1"}
    assert settings.consumer == {"fetch.min.bytes": "5"}
    plain = from_legacy_flags(consumer_config=None, producer_config=None, include=None, exclude=None, streams=1,
                              solution_defaults=defaults_from(_config(tmp_path / "plain", secured=False)))
    assert plain.source_cluster == {"bootstrap.servers": "primary:9092"}


class _Recorder:
    """Stands in for a client class: records the config each instance was given."""

    def __init__(self) -> None:
        self.configs: list[dict[str, Any]] = []

    def __call__(self, config: dict[str, Any], **kwargs: Any) -> _Recorder:
        self.configs.append({**config, **kwargs})
        return self

    def partitions_for_topic(self, topic: str) -> set[int]:
        return set()

    def close(self, *args: Any, **kwargs: Any) -> None:
        pass


def test_every_client_of_either_bus_takes_that_sites_principal_settings(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    _props, settings = _mirror_settings(tmp_path, secured=True)
    admins: Any = _Recorder()  # also the checkpointer's admin clients, which it does not call here
    producers, consumers = _Recorder(), _Recorder()
    monkeypatch.setattr(mirror, "AdminClient", admins)
    monkeypatch.setattr(syncs, "KafkaProducer", producers)
    monkeypatch.setattr(syncs, "KafkaConsumer", consumers)
    monkeypatch.setattr(checkpoints, "KafkaProducer", producers)
    the_mirror = Mirror(settings)
    the_mirror._admin(settings.source_cluster, "dr-mirror-source-admin")
    the_mirror._admin(settings.target_cluster, "dr-mirror-target-admin")
    store = SyncStore(settings.source_cluster, settings.offset_syncs_topic, MirrorMetrics())
    assert store.load() == {}
    checkpoints.Checkpointer(settings, admins, admins, Registry(), MirrorMetrics())
    assert [c["client.id"] for c in admins.configs] == ["dr-mirror-source-admin", "dr-mirror-target-admin"]
    assert {k: admins.configs[0][k] for k in SECURED} == SECURED
    at_dr = {**DR_SECURED, "bootstrap.servers": "dr:19092"}
    assert {k: admins.configs[1][k] for k in at_dr} == at_dr
    syncs_producer, checkpoints_producer = producers.configs
    assert {k: syncs_producer[k] for k in SECURED} == SECURED
    assert {k: consumers.configs[0][k] for k in SECURED} == SECURED
    assert {k: checkpoints_producer[k] for k in at_dr} == at_dr

    # The workers' own connections: fetches from the primary, produces to the DR bus.
    securities: list[dict[str, str]] = []

    def security(conf: dict[str, str]) -> ClientSecurity:
        securities.append(dict(conf))
        return PLAINTEXT

    monkeypatch.setattr(worker, "client_security", security)
    monkeypatch.setattr(worker, "NodeConnections", lambda *args, **kwargs: _Recorder())
    monkeypatch.setattr(worker, "Metadata", lambda *args, **kwargs: _Recorder())
    task = Worker(0, settings, Registry(), store, {}, MirrorMetrics())
    task.stopping.set()
    task.run()
    assert securities == [SECURED, at_dr]


def test_settings_that_cannot_work_stop_the_mirror_instead_of_waiting() -> None:
    mirror_ = Mirror(Settings("primary", "dr", {"bootstrap.servers": "127.0.0.1:1"},
                              {"bootstrap.servers": "127.0.0.1:1"}, ("x",), ()), stopping=threading.Event())
    with pytest.raises(ConfigError, match=r"security\.protocol"):
        mirror_._admin({"bootstrap.servers": "127.0.0.1:1", "security.protocol": "BOGUS"}, "dr-mirror-source-admin")
