"""The audit event contract: what the console publishes is what the loader reads back; anything else is refused
with the first problem named (a foreign record on the audit topic is set aside, never loaded half-read)."""

from __future__ import annotations

import json

import pytest

from contracts import audit
from contracts.tables import console as tables


def test_an_event_round_trips_through_the_topic_and_the_table() -> None:
    event = audit.AuditEvent(user="viewer", action="captures.search", target="浙AWL999",
                             query={"plate": "浙AWL999", "limit": 50}, reason="case <b>42</b>", role="viewer",
                             client="127.0.0.1", user_agent="pytest")
    assert audit.decode(audit.encode(event)) == event
    row = tables.audit_row(event)
    entry = tables.read_audit(row)
    assert entry["query"] == event.query and entry["reason"] == "case <b>42</b>" and entry["time"] == event.time
    assert tables.audit_row_key(event) == tables.audit_row_key(audit.decode(audit.encode(event)))  # a replay: one row


def test_keys_sort_newest_first_and_time_keys_bound_them() -> None:
    old = audit.AuditEvent(user="a", action="x", time_ms=1_700_000_000_000)
    new = audit.AuditEvent(user="a", action="x", time_ms=1_700_000_000_001)
    assert tables.audit_row_key(new) < tables.audit_row_key(old)
    assert tables.audit_time_key(new.time_ms) <= tables.audit_row_key(new) < tables.audit_time_key(old.time_ms)


def test_rows_written_before_queries_were_recorded_read_their_detail_as_the_query() -> None:
    entry = tables.read_audit({b"a:time": b"2026-01-01T00:00:00.000+00:00", b"a:user": b"admin",
                               b"a:action": b"user.add", b"a:target": b"x", b"a:detail": b'{"role": "viewer"}',
                               b"a:outcome": b"ok"})
    assert entry["query"] == {"role": "viewer"} and "detail" not in entry


def _valid() -> dict[str, object]:
    return json.loads(audit.encode(audit.AuditEvent(user="u", action="a")))


@pytest.mark.parametrize(("value", "problem"), [
    (None, "no value"),
    (b"\xff\xfe", "not JSON"),
    (b"[1, 2]", "not a JSON object"),
    (json.dumps({**_valid(), "id": "../../x"}).encode(), "id"),
    (json.dumps({**_valid(), "time_ms": "yesterday"}).encode(), "time_ms"),
    (json.dumps({**_valid(), "time_ms": True}).encode(), "time_ms"),
    (json.dumps({**_valid(), "user": ""}).encode(), "user"),
    (json.dumps({k: v for k, v in _valid().items() if k != "action"}).encode(), "action: missing"),
    (json.dumps({**_valid(), "query": ["plate"]}).encode(), "query"),
    (json.dumps({**_valid(), "query": {"q": "x" * 9000}}).encode(), "query"),
    (json.dumps({**_valid(), "reason": 42}).encode(), "reason"),
    (json.dumps({**_valid(), "outcome": None}).encode(), "outcome"),
])
def test_foreign_records_are_refused_naming_the_problem(value: bytes | None, problem: str) -> None:
    with pytest.raises(audit.InvalidAuditEvent, match=problem):
        audit.decode(value)


def test_long_texts_are_cut_not_refused() -> None:
    event = audit.decode(json.dumps({**_valid(), "user_agent": "A" * 5000}).encode())
    assert len(event.user_agent) == audit.MAX_TEXT
