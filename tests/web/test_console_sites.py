"""A console at one site of two (`web/site.py`, `web/standby.py`, `web/services/account_sync.py`), on real processes.

- Standing by, a console is read-only (writes 409 naming the active site's console, 503 while a switchover drains),
  sends pages to the active site's console but keeps its DR page, lets users log in, and audits to its site's own
  ``dr.audit``; once the active-site record names its site it acts.
- The users and sessions of the acting site's HBase reach the other site's HBase through the accounts topic, and
  come back the other way after a switchover; a record that is no account change is set aside.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import happybase
import httpx
from confluent_kafka import Consumer, Producer

from contracts import active_site
from deploy.processes.console import Backing, ConsoleProcess, password_of
from deploy.processes.gateway import Gateway, start_gateway
from web.auth.sessions import SessionStore
from web.auth.users import UserStore
from web.metrics import SKIPPED
from web.services.account_sync import AccountSync

PRIMARY_CONSOLE = "https://primary.example:8443"
HTML = {"Accept": "text/html,application/xhtml+xml"}


def _wait(check: Callable[[], Any], timeout: float = 20, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what or check}"
        time.sleep(0.1)


def _record(data: Path, active: str, switching_to: str | None = None) -> None:
    active_site.write(data, active_site.ActiveSite(active, dt.datetime.now(dt.UTC), "test", switching_to))


def _dr_console(make_console: Callable[..., ConsoleProcess], data: Path) -> ConsoleProcess:
    return make_console(site={"name": "dr", "record": str(active_site.path(data)),
                              "consoles": {"primary": PRIMARY_CONSOLE, "dr": "https://dr.example:18000"}})


def _acting(console: ConsoleProcess, acting: bool) -> bool:
    return bool(console.client("viewer").get("/api/v1/site").json()["acting"] is acting)


def test_a_standing_by_console_is_read_only_and_sends_operators_to_the_active_one(
        make_console: Callable[..., ConsoleProcess], tmp_path: Path) -> None:
    _record(tmp_path, "primary")
    standby = _dr_console(make_console, tmp_path)
    site = standby.client("viewer").get("/api/v1/site").json()
    assert site["site"] == "dr" and site["active"] == "primary" and site["acting"] is False
    assert site["active_console"] == PRIMARY_CONSOLE and "standing by" in site["banner"]

    name = f"standby{uuid.uuid4().hex[:8]}"
    refused = standby.client("admin").post("/api/v1/users", json={"username": name, "password": password_of(name),
                                                                   "role": "viewer"})
    assert refused.status_code == 409, refused.text
    assert refused.json()["active_console"] == PRIMARY_CONSOLE and "read-only" in refused.json()["detail"]
    assert name not in {u["username"] for u in standby.client("admin").get("/api/v1/users").json()}

    with httpx.Client(base_url=standby.url, timeout=30) as browser:
        login = browser.post("/api/v1/auth/session", data={"username": "operator", "password": password_of("operator")})
        assert login.status_code == 200, login.text  # logging in is not a change of the site's data
        page = browser.get("/captures?plate=ABC", headers=HTML)
        assert page.status_code == 303 and page.headers["location"] == f"{PRIMARY_CONSOLE}/captures?plate=ABC"
        dr_page = browser.get("/dr", headers=HTML)  # the DR page stays: switchovers are run from either site
        assert dr_page.status_code == 200
        page_data = dr_page.text.split('<script id="page-data" type="application/json">')[1].split("</script>")[0]
        data = json.loads(page_data)
        assert data["site"] == {"site": "dr", "active": "primary", "switching_to": None, "acting": False,
                                "active_console": PRIMARY_CONSOLE}
        assert browser.get("/api/v1/site").status_code == 200  # the API's reads answer

    # its audit goes to the site's own topic (the mirror is the one writer of ``audit`` there) and into the trail
    _consume(standby.backing, "dr.audit", lambda e: e["user"] == "operator" and e["action"] == "login")
    standby.audit(lambda entries: any(e["user"] == "operator" for e in entries), action="login")

    _record(tmp_path, "primary", switching_to="dr")
    _wait(lambda: standby.client("viewer").get("/api/v1/site").json()["switching_to"] == "dr", what="switching")
    draining = standby.client("admin").post("/api/v1/users", json={"username": name, "password": password_of(name),
                                                                    "role": "viewer"})
    assert draining.status_code == 503 and draining.headers["retry-after"], draining.text
    assert "switchover" in draining.json()["detail"]

    _record(tmp_path, "dr")
    _wait(lambda: _acting(standby, True), what="the DR console acting")
    created = standby.client("admin").post("/api/v1/users", json={"username": name, "password": password_of(name),
                                                                   "role": "viewer"})
    assert created.status_code == 201, created.text
    with httpx.Client(base_url=standby.url, timeout=30) as browser:
        browser.post("/api/v1/auth/session", data={"username": "viewer", "password": password_of("viewer")})
        assert browser.get("/captures", headers=HTML).status_code == 200  # acting: no redirect
    assert standby.client("admin").delete(f"/api/v1/users/{name}").status_code == 204


def _consume(backing: Backing, topic: str, wanted: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
    consumer = Consumer({"bootstrap.servers": backing.broker.bootstrap, "group.id": f"t-{uuid.uuid4().hex}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    found: list[dict[str, Any]] = []
    try:
        deadline = time.monotonic() + 20
        while not any(wanted(e) for e in found):
            assert time.monotonic() < deadline, f"no such event on {topic}: {found}"
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                found.append(json.loads(message.value()))
    finally:
        consumer.close()
    return found


def _connect(gateway: Gateway) -> Callable[[], contextlib.AbstractContextManager[happybase.Connection]]:
    @contextlib.contextmanager
    def connect() -> Iterator[happybase.Connection]:
        connection = happybase.Connection("127.0.0.1", gateway.port)
        try:
            yield connection
        finally:
            connection.close()
    return connect


def test_users_and_sessions_reach_the_other_site_and_come_back_after_a_switchover(
        console_backing: Backing, tmp_path: Path) -> None:
    """Two sites' HBase (the session's gateway, a second one), one accounts topic (the mirror copies it as it is)."""
    other = start_gateway(tmp_path / "hbase-dr", log_dir=tmp_path)
    topic = f"console.accounts.{uuid.uuid4().hex[:8]}"
    bus = {"bootstrap.servers": console_backing.broker.bootstrap}
    primary_acts = [True]
    at_primary, at_dr = _connect(console_backing.gateway), _connect(other)
    syncs = [AccountSync(at_primary, bus, topic, lambda: primary_acts[0], 3.0, interval_s=0.2),
             AccountSync(at_dr, bus, topic, lambda: not primary_acts[0], 3.0, interval_s=0.2)]
    users = UserStore(at_primary, cache_ttl_s=0), UserStore(at_dr, cache_ttl_s=0)
    sessions = SessionStore(at_primary, 3600, cache_ttl_s=0), SessionStore(at_dr, 3600, cache_ttl_s=0)
    try:
        for sync in syncs:
            sync.start()
        name = f"sync{uuid.uuid4().hex[:8]}"
        user = users[0].create(name, password_of(name), "operator")
        session_id = sessions[0].open(name, user.uid)
        _wait(lambda: users[1].get(name), what="the user at the DR site")
        _wait(lambda: sessions[1].get(session_id), what="the session at the DR site")
        assert users[1].authenticate(name, password_of(name)) is not None  # the same password hash

        skipped_before = _skipped(topic)
        producer = Producer(bus)
        producer.produce(topic, b"not json", key=b"console_user:x")
        producer.produce(topic, b"{}", key=b"no-table-row")
        producer.flush(10)
        sessions[0].close(session_id)  # a logout: a tombstone
        _wait(lambda: sessions[1].get(session_id) is None, what="the session closed at the DR site")
        assert _skipped(topic) == skipped_before + 2
        assert users[1].get(name) is not None

        primary_acts[0] = False  # a switchover: the DR site's console publishes, the primary's applies
        second = f"sync{uuid.uuid4().hex[:8]}"
        users[1].create(second, password_of(second), "viewer")
        users[1].remove(name)
        _wait(lambda: users[0].get(second), what="a user made at the DR site, at the primary")
        _wait(lambda: users[0].get(name) is None, what="a user removed at the DR site, gone at the primary")
        assert syncs[1].published._value.get() >= 2 and syncs[0].applied._value.get() >= 2
        users[0].remove(second)
    finally:
        for sync in syncs:
            sync.stop()
        other.kill()


def _skipped(topic: str) -> float:
    return sum(sample.value for metric in SKIPPED.collect() for sample in metric.samples
               if sample.name.endswith("_total") and sample.labels.get("topic") == topic
               and sample.labels.get("reader") == "account-sync")
