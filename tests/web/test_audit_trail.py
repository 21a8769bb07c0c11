"""The audit trail through real processes: events go console -> ``audit`` topic -> loader -> HBase -> audit API.

Logins, failed logins and logouts are recorded with the client's address and agent; the API filters by user,
action, q and time; the CSV export is itself audited and cannot carry a spreadsheet formula; a foreign record on
the audit topic is set aside and counted while the events after it load; an event replayed lands on its own row.
"""

from __future__ import annotations

import csv
import io
import time
import uuid
from datetime import UTC, datetime, timedelta

import happybase
import httpx
from confluent_kafka import Producer

from contracts import audit as events
from contracts.retention import Retention
from contracts.tables import console as tables
from contracts.topics import Topics
from deploy.processes.console import ConsoleProcess, password_of

AGENT = "audit-trail-test/1.0"


def _produce(console: ConsoleProcess, *values: bytes) -> None:
    producer = Producer({"bootstrap.servers": console.backing.broker.bootstrap, "acks": "all"})
    for value in values:
        producer.produce(Topics().audit, value)
    assert producer.flush(30) == 0


def test_logins_failed_logins_and_logouts_are_audited_with_client_and_agent(console: ConsoleProcess) -> None:
    name = f"who-{uuid.uuid4().hex[:8]}"
    with httpx.Client(base_url=console.url, headers={"User-Agent": AGENT}) as browser:
        assert browser.post("/api/v1/auth/session", data={"username": "viewer", "password": "wrong"}).status_code == 401
        assert browser.post("/api/v1/auth/token", data={"username": name, "password": "x"}).status_code == 401
        assert browser.post("/api/v1/auth/session",
                            data={"username": "viewer", "password": password_of("viewer")}).status_code == 200
        assert browser.post("/api/v1/auth/logout", headers={"X-Requested-With": "console"}).status_code == 204
    failed = console.audit(action="login.failed", q=name)
    assert [(e["user"], e["target"], e["outcome"], e["client"], e["user_agent"], e["query"]) for e in failed] == [
        (name, name, "refused: wrong username or password", "127.0.0.1", AGENT, {"via": "token"})]
    mine = console.audit(lambda found: len(found) >= 3,
                         user="viewer", **{"from": (datetime.now(UTC) - timedelta(seconds=60)).isoformat()})
    ours = [(e["action"], e["query"].get("via"), e["role"]) for e in mine if e["user_agent"] == AGENT]
    assert ours[:3] == [("logout", None, "viewer"), ("login", "session", "viewer"), ("login.failed", "session", "")]


def test_filters_time_range_and_paging(console: ConsoleProcess) -> None:
    tag = uuid.uuid4().hex[:8]
    admin = console.client("admin")
    before = datetime.now(UTC)
    for n in range(3):
        assert admin.post("/api/v1/users", json={"username": f"f-{tag}-{n}", "password": password_of("f"),
                                                 "role": "viewer"}).status_code == 201
    after = datetime.now(UTC) + timedelta(seconds=1)
    entries = console.audit(lambda found: len(found) == 3, q=tag, action="user.add", user="admin")
    assert [e["target"] for e in entries] == [f"f-{tag}-{n}" for n in (2, 1, 0)]
    window = {"q": tag, "from": before.isoformat(), "to": after.isoformat()}
    assert len(admin.get("/api/v1/audit", params=window).json()["items"]) == 3
    earlier = before - timedelta(hours=1)
    empty = {"q": tag, "from": (earlier - timedelta(hours=1)).isoformat(), "to": earlier.isoformat()}
    assert admin.get("/api/v1/audit", params=empty).json() == {"items": [], "next": None}
    assert admin.get("/api/v1/audit", params={"q": tag, "user": "nobody-else"}).json()["items"] == []
    first = admin.get("/api/v1/audit", params={"q": tag, "limit": 2}).json()
    rest = admin.get("/api/v1/audit", params={"q": tag, "limit": 2, "cursor": first["next"]}).json()
    assert [e["target"] for e in first["items"] + rest["items"]] == [e["target"] for e in entries]
    for params, field in (({"to": before.isoformat(), "from": after.isoformat()}, "to"),
                          ({"from": "yesterday"}, "from"), ({"from": "2026-01-01T00:00:00"}, "from"),
                          ({"user": ""}, "user"), ({"q": "x" * 201}, "q")):
        refused = admin.get("/api/v1/audit", params=params)
        assert refused.status_code == 422 and refused.json()["detail"][0]["loc"] == ["query", field], params
    for user in ("viewer", "operator"):
        assert console.client(user).get("/api/v1/audit").status_code == 403
        assert console.client(user).get("/api/v1/audit/export.csv").status_code == 403


def test_csv_export_is_audited_and_carries_no_formula(console: ConsoleProcess) -> None:
    formula = f"=HYPERLINK(\"http://evil.example/{uuid.uuid4().hex[:6]}\")"
    assert console.login(formula, "whatever").status_code == 401
    console.audit(action="login.failed", q=formula)
    response = console.client("admin").get("/api/v1/audit/export.csv", params={"action": "login.failed", "q": formula})
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/csv")
    assert response.headers["content-disposition"] == 'attachment; filename="audit.csv"'
    rows = list(csv.DictReader(io.StringIO(response.text)))
    assert len(rows) == 1 and rows[0]["user"] == "'" + formula and rows[0]["action"] == "login.failed"
    exported = console.audit(action="audit.export", user="admin")
    assert exported[0]["query"] == {"action": "login.failed", "q": formula}


def test_foreign_records_are_set_aside_and_replays_land_once(console: ConsoleProcess) -> None:
    tag = uuid.uuid4().hex[:8]
    good = events.AuditEvent(user="replayed", action="user.add", target=f"replay-{tag}")
    _produce(console, b"\x00not an event", b'{"user": "x"}', events.encode(good), events.encode(good))
    console.audit(q=f"replay-{tag}")
    time.sleep(1)  # the replay is in the same batch or the next: either way the same row
    assert len(console.audit(q=f"replay-{tag}")) == 1
    metrics = console.client(None).get("/metrics").text
    skipped = [line for line in metrics.splitlines()
               if line.startswith("console_bus_records_skipped_total") and 'reader="audit-loader"' in line]
    assert skipped and float(skipped[0].rsplit(" ", 1)[1]) >= 2, skipped
    assert "console_audit_events_loaded_total" in metrics and "console_audit_publish_seconds_bucket" in metrics


def test_an_audited_request_says_what_the_audit_cost(console: ConsoleProcess) -> None:
    response = console.login("viewer")
    assert response.status_code == 200
    assert response.headers["server-timing"].startswith("audit;dur=")
    assert "server-timing" not in console.client("viewer").get("/api/v1/auth/me").headers


def test_the_audit_table_is_kept_for_the_configured_retention(console: ConsoleProcess) -> None:
    console.audit(action="login")  # the loader has written, so the table exists
    conn = happybase.Connection("127.0.0.1", console.backing.gateway.port)
    try:
        assert conn.table(tables.AUDIT_TABLE).families()[b"a"]["time_to_live"] == Retention().audit_ttl_s
    finally:
        conn.close()
