"""The console's bus identity, without a broker: every bus client the console process makes (its admin client, the
audit producer and loader, the SSE hub, the messages reader, the video and surveillance command producers, the
DescribeLogDirs connections) starts from principal ``console``'s settings (``[bus] client_properties_dir``), or
from the plain bootstrap without it; the DR page's reader from principal
``console``'s settings at the DR site (``[dr] client_properties_dir``). And a command the bus's ACLs refuse the
console's identity is a 403 naming what it may not do, never a 500 or a 503.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import typing
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from confluent_kafka import KafkaError, KafkaException

from bus.client.admin import AdminError, AdminTimeoutError
from bus.client.errors import KafkaConnectionError
from bus.client.security import ClientSecurity
from contracts.config import Config
from web import audit, backends, events
from web.app import create_app
from web.backends import Backends, BackendUnavailable
from web.dependencies import AdminDep, get_audit
from web.events import EventHub
from web.services import account_sync, audit_loader, dr, kafka_calls, log_dirs, messages, surveillance, video
from web.services.account_sync import AccountSync
from web.services.errors import Conflict, Forbidden, NotFound
from web.settings import ConsoleSettings

BOOTSTRAP = "127.0.0.1:19093"
SECURED = "broker.example:9094"
RESOLVED = ClientSecurity("SASL_SSL")
"""What the fake ``client_security`` resolves (the real one would read the trust store)."""
DR_SECURED = "127.0.0.1:19094"
JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="console" password="pw";'


class Built(Exception):
    """Raised by a fake client once it has recorded its config: the test needs nothing more of it."""


def recorder(made: dict[str, dict[str, Any]], name: str) -> Callable[..., Any]:
    def client(config: dict[str, Any], *_args: Any, **_kwargs: Any) -> Any:
        made[name] = dict(config)
        raise Built(name)
    return client


def console_settings(tmp_path: Path, secured: bool, mode: int = 0o600) -> ConsoleSettings:
    """The console's settings from a config naming a ``console.properties`` (``secured``, with ``mode``) or not."""
    sections: dict[str, Any] = {"bus": {"bootstrap_servers": BOOTSTRAP}, "dr": {"bootstrap_servers": "127.0.0.1:1"},
                                "console": {"data_dir": str(tmp_path / "console")}}
    if secured:  # each site's bus with its own properties file (the DR site's: another password, same CA)
        for section, bootstrap, password in (("bus", SECURED, "pw"), ("dr", DR_SECURED, "dr-pw")):
            directory = tmp_path / f"clients-{section}"
            directory.mkdir()
            properties = directory / "console.properties"
            properties.write_text(f"bootstrap.servers={bootstrap}\nsecurity.protocol=SASL_SSL\n"
                                  f"sasl.mechanism=SCRAM-SHA-512\nsasl.jaas.config={JAAS.replace('pw', password)}\n"
                                  "ssl.truststore.type=PEM\nssl.truststore.location=/abs/ca.pem\n")
            properties.chmod(mode)
            sections[section]["client_properties_dir"] = str(directory)
    return ConsoleSettings.from_config(Config(sections, tmp_path / "solution.toml"))


def made_clients(settings: ConsoleSettings, monkeypatch: pytest.MonkeyPatch) -> dict[str, dict[str, Any]]:
    """The config each of the console's bus clients is made with (the clients themselves are fakes)."""
    made: dict[str, dict[str, Any]] = {}
    for module, kind, name in [(backends, "AdminClient", "admin"), (backends, "GroupAdminClient", "group admin"),
                               (audit, "Producer", "audit"),
                               (audit_loader, "AdminClient", "audit-loader admin"),
                               (audit_loader, "Consumer", "audit-loader"), (events, "Consumer", "hub"),
                               (messages, "Consumer", "messages"), (video, "Producer", "video"),
                               (surveillance, "Producer", "surveillance"), (dr, "Consumer", "dr"),
                               (account_sync, "AdminClient", "accounts admin"), (account_sync, "Consumer", "accounts"),
                               (account_sync, "Producer", "accounts producer")]:
        monkeypatch.setattr(module, kind, recorder(made, name))
    security: list[dict[str, str]] = []  # what the DescribeLogDirs connections' security is resolved from
    monkeypatch.setattr(log_dirs, "client_security", lambda conf: security.append(dict(conf)) or RESOLVED)
    monkeypatch.setattr(log_dirs, "BrokerConnection", lambda *_a, **kw: recorder(made, "log dirs")(kw))
    monkeypatch.setattr(surveillance.SurveillanceConsole, "_ensure_topic", lambda _self, _topic: None)
    metadata = SimpleNamespace(topics={"t": SimpleNamespace(partitions={0: None})})
    monkeypatch.setattr(messages.bus, "metadata", lambda _backends: metadata)
    ends = iter([0, 5])  # the earliest offset, then the latest: one record to read
    monkeypatch.setattr(messages.bus, "offsets", lambda _b, _tps, _spec: {("t", 0): next(ends)})

    shared = Backends(settings)
    loader = audit_loader.AuditLoader(shared.hbase, settings.bus, ["audit"], 1.0, 60)
    loader.stop()  # no thread: _run makes its consumer at once
    hub = EventHub(settings.bus, ["t"])
    hub.stop()
    triggers: list[Callable[[], object]] = [
        shared.bus_admin,
        shared.group_admin,
        lambda: audit.AuditLog(shared.hbase, settings.bus, lambda: "audit", 1.0, 60).record("someone", "test"),
        loader.ensure_topic,
        loader._run,
        hub._run,
        lambda: messages.latest(shared, "t", 1),
        lambda: video.VideoService(settings, shared)._publish("camera", {}),
        lambda: surveillance.SurveillanceConsole(shared, hub)._publish("control", "key", None),
        lambda: dr.DrService(dr.DrSettings.from_console(settings), shared, 30).checkpoints(),
        lambda: log_dirs.LogDirs(settings.bus_java).sizes([("127.0.0.1", 1)], {"t": [0]}),
        AccountSync(shared.hbase, settings.bus, "console.accounts", lambda: True, 1.0)._follow,  # makes the topic
        AccountSync(shared.hbase, settings.bus, "console.accounts", lambda: False, 1.0)._follow,  # follows it
        AccountSync(shared.hbase, settings.bus, "console.accounts", lambda: True, 1.0)._producer,
    ]
    for trigger in triggers:
        with pytest.raises(Built):
            trigger()
    assert security == [settings.bus_java]
    assert made.pop("log dirs")["security"] is RESOLVED
    return made


def test_every_client_logs_in_as_console_with_client_properties_dir(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    settings = console_settings(tmp_path, secured=True)
    assert settings.bus == {"bootstrap.servers": SECURED, "security.protocol": "SASL_SSL",
                            "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "console", "sasl.password": "pw",
                            "ssl.ca.location": "/abs/ca.pem"}
    assert settings.bus_java["sasl.jaas.config"] == JAAS
    assert settings.bus_java["ssl.truststore.location"] == "/abs/ca.pem"
    assert "pw" not in repr(settings)

    made = made_clients(settings, monkeypatch)
    assert made.pop("dr") == {"bootstrap.servers": DR_SECURED, "security.protocol": "SASL_SSL",
                              "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "console", "sasl.password": "dr-pw",
                              "ssl.ca.location": "/abs/ca.pem", "group.id": "console-dr", "enable.auto.commit": False,
                              "log_level": 0}  # the DR site's bus, as the console's identity there
    assert "dr-pw" not in repr(settings)
    assert made.pop("group admin").items() >= settings.bus_java.items()  # the bus package's client: Kafka's keys
    assert sorted(made) == ["accounts", "accounts admin", "accounts producer", "admin", "audit", "audit-loader",
                            "audit-loader admin", "hub", "messages", "surveillance", "video"]
    for name, config in made.items():
        assert config.items() >= settings.bus.items(), name
    assert made["audit-loader"]["group.id"] == audit_loader.GROUP_ID
    assert made["hub"]["group.id"].startswith("console-hub-")
    assert made["messages"]["group.id"] == "console-messages"
    assert made["accounts"]["group.id"] == "console-account-sync"  # assigned, never committed: under console-


def test_without_client_properties_dir_clients_get_the_plain_bootstrap(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    settings = console_settings(tmp_path, secured=False)
    assert settings.bus == settings.bus_java == {"bootstrap.servers": BOOTSTRAP}

    made = made_clients(settings, monkeypatch)
    assert made.pop("dr")["bootstrap.servers"] == "127.0.0.1:1"  # [dr] with no client_properties_dir: PLAINTEXT
    for name, config in made.items():
        assert config["bootstrap.servers"] == BOOTSTRAP, name
        assert not any(key.startswith(("security.", "sasl.", "ssl.")) for key in config), name


def test_a_properties_file_open_to_others_stops_the_console(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="open to other users"):  # python -m web: "bad config", exit 2
        console_settings(tmp_path, secured=True, mode=0o644)


def failed(code: int) -> concurrent.futures.Future[Any]:
    future: concurrent.futures.Future[Any] = concurrent.futures.Future()
    future.set_exception(KafkaException(KafkaError(code)))
    return future


@pytest.mark.parametrize(("code", "operation", "said"), [
    (KafkaError.TOPIC_AUTHORIZATION_FAILED, "delete topic x", "may not delete topic x"),
    (KafkaError.TOPIC_AUTHORIZATION_FAILED, "", "may not use topic x"),
    (KafkaError.GROUP_AUTHORIZATION_FAILED, "", "may not use group x"),
    (KafkaError.CLUSTER_AUTHORIZATION_FAILED, "", "may not act on the cluster"),
])
def test_authorization_errors_are_forbidden_naming_the_operation(tmp_path: Path, code: int, operation: str,
                                                                 said: str) -> None:
    shared = Backends(console_settings(tmp_path, secured=False))
    with pytest.raises(Forbidden) as refused:
        kafka_calls.wait(shared, failed(code), "x", operation)
    assert said in str(refused.value)
    assert "User:console" in str(refused.value)
    assert KafkaError(code).name() in str(refused.value)


class RefusingBackends(Backends):
    """The bus's ACLs refuse the console's DeleteTopics (the topic exists, the console may see it)."""

    def bus_admin(self) -> Any:
        return SimpleNamespace(
            list_topics=lambda **_kw: SimpleNamespace(topics={"city.x": None}),
            delete_topics=lambda names, **_kw: {name: failed(KafkaError.TOPIC_AUTHORIZATION_FAILED) for name in names})


def test_a_refused_delete_topic_is_a_403_and_audited_as_refused(tmp_path: Path) -> None:
    settings = console_settings(tmp_path, secured=False)
    app = create_app(settings, RefusingBackends(settings))
    recorded: list[tuple[Any, ...]] = []
    admin = typing.get_args(AdminDep)[1].dependency
    app.dependency_overrides[admin] = lambda: SimpleNamespace(username="root", role=None)
    audit = SimpleNamespace(record=lambda *args, reason=None: recorded.append(args))
    app.dependency_overrides[get_audit] = lambda: audit

    async def delete() -> httpx.Response:  # no lifespan: the app's threads and clients never start
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://console") as client:
            return await client.delete("/api/v1/bus/topics/city.x")

    response = asyncio.run(delete())

    assert response.status_code == 403, response.text
    assert response.json() == {"backend": "bus", "detail": "the console's bus identity (User:console) may not delete "
                               "topic city.x: the bus refuses it (TOPIC_AUTHORIZATION_FAILED)"}
    (_user, action, target, _query, outcome), = recorded
    assert (action, target) == ("topic.delete", "city.x")
    assert outcome.startswith("refused: the console's bus identity")


def test_log_dirs_refused_by_the_bus_are_forbidden_not_zero_sizes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(log_dirs, "BrokerConnection", lambda *_a, **_kw: SimpleNamespace(close=lambda: None))
    refused = SimpleNamespace(error_code=int(KafkaError.CLUSTER_AUTHORIZATION_FAILED), results=[])
    monkeypatch.setattr(log_dirs, "request_for", lambda *_a: refused)
    with pytest.raises(Forbidden, match=r"may not describe the cluster's log dirs .*CLUSTER_AUTHORIZATION_FAILED"):
        log_dirs.LogDirs({"bootstrap.servers": BOOTSTRAP}).sizes([("127.0.0.1", 1)], {"t": [0]})


@pytest.mark.parametrize(("error", "raised", "said"), [
    (AdminError(KafkaError.GROUP_AUTHORIZATION_FAILED), Forbidden, "may not use group g"),
    (AdminError(KafkaError.GROUP_ID_NOT_FOUND), NotFound, "g"),
    (AdminError(KafkaError.NON_EMPTY_GROUP), Conflict, "g: "),
    (AdminError(KafkaError.COORDINATOR_NOT_AVAILABLE), BackendUnavailable, "COORDINATOR_NOT_AVAILABLE"),
    (KafkaConnectionError("connection to 10.0.0.1:9092 refused"), BackendUnavailable, "10.0.0.1:9092"),
    (AdminTimeoutError(7, "list consumer groups timed out after 6s"), BackendUnavailable, "timed out after 6s"),
])
def test_the_group_admins_failures_are_what_a_user_can_act_on(error: Exception, raised: type[Exception],
                                                              said: str) -> None:
    """The bus package's admin client (the console's group calls) fails with exceptions, never by aborting the
    process as librdkafka's did: each becomes the console's answer (403, 404, 409, else 503 naming the bus)."""
    def fail() -> None:
        raise error

    with pytest.raises(raised) as refused:
        kafka_calls.call(fail, "g")
    assert said in str(refused.value)
