"""The surveillance service (principal ``surveillance``) and the hit loader (``hit-loader``) reach the bus as
themselves: every client starts from the principal's settings when the config names ``[bus]
client_properties_dir``, and from the bare bootstrap address without it. No broker: the clients are stand-ins
that keep the settings they were given."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from contracts.config import Config
from surveillance import loader, rewind, streams
from surveillance.loader import Loader, LoaderSettings
from surveillance.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
PLAIN, SECURE = "plain:9092", "secure:9093"


def secured(directory: Path, *principals: str, mode: int = 0o600) -> Config:
    """A config naming ``directory/secrets`` as its client properties, one file (of ``mode``) per principal,
    each with the password ``pw``."""
    secrets = directory / "secrets"
    secrets.mkdir(exist_ok=True)
    for principal in principals:
        path = secrets / f"{principal}.properties"
        path.write_text(f"bootstrap.servers={SECURE}\nsecurity.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
                        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
                        f'username="{principal}" password="pw";\n'
                        "ssl.truststore.type=PEM\nssl.truststore.location=/abs/ca.pem\n")
        path.chmod(mode)
    return Config({"bus": {"bootstrap_servers": PLAIN, "client_properties_dir": str(secrets)}},
                  directory / "solution.toml")


def librdkafka(principal: str) -> dict[str, str]:
    """What :func:`secured`'s file of ``principal`` gives a confluent-kafka client."""
    return {"bootstrap.servers": SECURE, "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": principal, "sasl.password": "pw", "ssl.ca.location": "/abs/ca.pem"}


def starts_from(config: dict[str, Any], settings: dict[str, str]) -> bool:
    return all(config.get(key) == value for key, value in settings.items())


class Client:
    """A Consumer, Producer or AdminClient stand-in: keeps its config; a consumer's first poll sets ``stop``."""

    made: list[dict[str, Any]]
    stop: threading.Event

    def __init__(self, config: dict[str, Any]) -> None:
        self.made.append(config)

    def subscribe(self, _topics: list[str]) -> None:
        pass

    def consume(self, _size: int, _timeout: float) -> list[Any]:
        self.stop.set()
        return []

    def close(self) -> None:
        pass


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The configs of the clients the surveillance modules build during the test."""
    monkeypatch.setattr(Client, "made", [], raising=False)
    monkeypatch.setattr(Client, "stop", threading.Event(), raising=False)
    for module, name in ((streams, "Consumer"), (streams, "Producer"), (streams, "AdminClient"), (rewind, "Consumer"),
                         (loader, "Consumer")):
        monkeypatch.setattr(module, name, Client)
    return Client.made


def test_every_client_of_the_service_starts_from_its_principal(tmp_path: Path, made: list[dict[str, Any]]) -> None:
    settings = Settings.from_config(secured(tmp_path, "surveillance"))
    assert settings.bus == librdkafka("surveillance")
    assert "pw" not in repr(settings) and settings.bootstrap == SECURE
    streams.make_consumer(settings, "surveillance-watch", "watch")
    streams.make_producer(settings, "watch")
    streams.make_admin(settings)
    streams.CommandLog(settings, settings.topics.control_watchlist, "watch-commands")
    rewind.Rewind(settings, "cloned", lambda: 0)
    assert len(made) == 5 and all(starts_from(config, settings.bus) for config in made)
    assert [config.get("group.id") for config in made] == [
        "surveillance-watch", None, None, "surveillance-watch-commands-unused", "surveillance-cloned-peek"]


def test_the_hit_loader_consumes_as_its_principal(tmp_path: Path, made: list[dict[str, Any]]) -> None:
    settings = LoaderSettings.from_config(secured(tmp_path, "hit-loader"))
    assert settings.bus == librdkafka("hit-loader") and "pw" not in repr(settings)
    Loader(settings).run(Client.stop)
    [config] = made
    assert starts_from(config, settings.bus) and config["group.id"] == "surveillance-loader"


def test_a_bootstrap_override_keeps_the_security(tmp_path: Path) -> None:
    config = secured(tmp_path, "surveillance", "hit-loader")
    assert LoaderSettings.from_config(config, "dr:19092").bus == {**librdkafka("hit-loader"),
                                                                  "bootstrap.servers": "dr:19092"}
    config.data["surveillance"] = {"bootstrap_servers": "other:9093"}
    assert Settings.from_config(config).bus == {**librdkafka("surveillance"), "bootstrap.servers": "other:9093"}


def test_without_a_properties_dir_the_bus_is_plaintext() -> None:
    config = Config({"bus": {"bootstrap_servers": PLAIN}})
    assert Settings.from_config(config).bus == {"bootstrap.servers": PLAIN}
    assert LoaderSettings.from_config(config).bus == {"bootstrap.servers": PLAIN}
    assert LoaderSettings.from_config(config, "dr:19092").bus == {"bootstrap.servers": "dr:19092"}


@pytest.mark.parametrize(("module", "principal"), [("surveillance", "surveillance"),
                                                   ("surveillance.loader", "hit-loader")])
def test_a_properties_file_open_to_others_stops_the_start(tmp_path: Path, module: str, principal: str) -> None:
    config = secured(tmp_path, principal, mode=0o644)
    config.path.write_text(f'[bus]\nbootstrap_servers = "{PLAIN}"\n'
                           f'client_properties_dir = "{config.data["bus"]["client_properties_dir"]}"\n')
    run = subprocess.run([sys.executable, "-m", module, "--config", str(config.path)], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2, run.stderr
    assert f"{principal}.properties is open to other users" in run.stderr and "pw" not in run.stderr
