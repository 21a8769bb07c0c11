"""The monitor reaches the bus as its principal ``monitor``: its consumer, producer, lag admin client and lock
consumer all start from the settings ``__main__`` reads once (no broker: the clients are stand-ins that keep the
settings they were given)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from contracts import bus_client
from contracts.config import Config
from contracts.topics import Topics
from monitoring import lag, leader, service
from monitoring.__main__ import PRINCIPAL
from monitoring.config import MonitoringConfig
from monitoring.leader import Leadership
from monitoring.locator import Locator
from monitoring.service import Monitor
from tests.surveillance.test_bus_identity import PLAIN, librdkafka, secured, starts_from

ROOT = Path(__file__).resolve().parents[2]


class Client:
    """A Consumer or AdminClient stand-in that keeps its config."""

    made: list[dict[str, Any]]

    def __init__(self, config: dict[str, Any]) -> None:
        self.made.append(config)

    def subscribe(self, _topics: list[str], **_callbacks: Any) -> None:
        pass


class Producer:
    """``open_producer``'s stand-in: keeps how it was asked to reach the bus and the topics it was to create."""

    def __init__(self, bus: Mapping[str, str], config: Mapping[str, Any]) -> None:
        self.bus, self.config = bus, config
        self.topics: dict[str, int] = {}

    def ensure_topics(self, partitions: Mapping[str, int]) -> None:
        self.topics.update(partitions)


class Store:
    """An empty HBase."""

    def ensure_tables(self) -> None:
        pass

    def states(self, _kind: str) -> list[tuple[str, dict[str, Any]]]:
        return []


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The configs of the consumers and admin clients the monitor builds during the test."""
    monkeypatch.setattr(Client, "made", [], raising=False)
    for module, name in ((service, "Consumer"), (lag, "AdminClient"), (leader, "Consumer")):
        monkeypatch.setattr(module, name, Client)
    monkeypatch.setattr(service, "open_producer", Producer)
    return Client.made


@pytest.mark.parametrize("secure", [True, False], ids=["secured", "plaintext"])
def test_every_client_of_the_monitor_starts_from_its_principal(tmp_path: Path, made: list[dict[str, Any]],
                                                               secure: bool) -> None:
    config = secured(tmp_path, "monitor") if secure else Config({"bus": {"bootstrap_servers": PLAIN}})
    bus = bus_client.librdkafka(config, PRINCIPAL)
    assert bus == (librdkafka("monitor") if secure else {"bootstrap.servers": PLAIN})
    monitor = Monitor(MonitoringConfig(), Topics(), bus, Store(), Locator(tmp_path / "map.json"))  # type: ignore[arg-type]
    lock = Leadership(monitor.bus, "monitoring", 10.0, monitor.producer.ensure_topics)
    monitor.start()
    monitor.scheduler.shutdown(wait=False)
    producer = monitor.producer
    assert isinstance(producer, Producer) and producer.bus == bus and producer.config["enable.idempotence"]
    assert set(producer.topics) == {"monitoring.lock", "alerts", "device.heartbeat", "ingest.stats",
                                    "capture.deadletter"}
    assert len(made) == 3 and all(starts_from(config, bus) for config in made)
    assert [config.get("group.id") for config in made] == [None, "monitoring.leader", "monitoring"]
    assert lock.group == "monitoring.leader"


def test_a_properties_file_open_to_others_stops_the_monitor(tmp_path: Path) -> None:
    config = secured(tmp_path, "monitor", mode=0o644)
    assert config.path is not None
    config.path.write_text(f'[bus]\nbootstrap_servers = "{PLAIN}"\n'
                           f'client_properties_dir = "{config.data["bus"]["client_properties_dir"]}"\n')
    run = subprocess.run([sys.executable, "-m", "monitoring", "--config", str(config.path)], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2, run.stderr
    assert "monitor.properties is open to other users" in run.stderr and "pw" not in run.stderr
