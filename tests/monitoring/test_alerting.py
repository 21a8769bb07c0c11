"""The alert engine's semantics, step by step on a fake clock: Prometheus' rule states, Alertmanager's
fingerprint, grouping, dedup, repeat, silences and inhibition, and the config checks."""

from __future__ import annotations

import pytest

from contracts.alerts import fingerprint, label_hash
from monitoring.alerts import FIRING, RESOLVED, AlertBook, Candidate
from monitoring.config import ConfigError, InhibitRule, Receiver, Route, parse
from monitoring.dispatch import Dispatcher, LogEntry, NotificationLog, group_key, needs_update
from monitoring.matchers import Matcher
from monitoring.silences import new_silence


def test_fingerprint_is_prometheus_label_set_fingerprint() -> None:
    # common/model signature_test.go: TestLabelsToSignature
    assert label_hash({"name": "garland, briggs", "fear": "love is not enough"}) == 5799056148416392346
    assert label_hash({}) == 14695981039346656037
    assert fingerprint({"a": "b", "c": "d"}) == fingerprint({"c": "d", "a": "b"})
    assert len(fingerprint({"a": "b"})) == 16


def cand(**labels: str) -> Candidate:
    return Candidate({"alertname": "A", **labels}, {"summary": "s"})


def test_pending_for_then_firing_keep_firing_then_one_resolution() -> None:
    book = AlertBook()
    assert book.update("A", 10, 20, [cand(device_ip="1")], now=0) == []
    assert book.update("A", 10, 20, [cand(device_ip="1")], now=5) == []
    fired = book.update("A", 10, 20, [cand(device_ip="1")], now=10)
    assert [a.state for a in fired] == [FIRING] and fired[0].fired_at == 10
    # condition gone: keeps firing for keep_firing_for_s, then resolves exactly once
    assert book.update("A", 10, 20, [], now=15) == []
    assert book.update("A", 10, 20, [], now=29) == []
    resolved = book.update("A", 10, 20, [], now=30)
    assert [a.state for a in resolved] == [RESOLVED] and resolved[0].resolved_at == 30
    assert book.update("A", 10, 20, [], now=35) == []
    # the same labels again: a new incident, pending first
    assert book.update("A", 10, 20, [cand(device_ip="1")], now=40) == []
    assert next(iter(book.alerts.values())).state == "pending"


def test_pending_that_goes_away_is_dropped_silently() -> None:
    book = AlertBook()
    book.update("A", 10, 0, [cand(device_ip="1")], now=0)
    assert book.update("A", 10, 0, [], now=5) == []
    assert book.alerts == {}


def test_flapping_condition_is_one_incident() -> None:
    book = AlertBook()
    changes = []
    for step in range(60):  # active 3 s, gone 3 s, for a minute
        active = [cand(device_ip="1")] if step % 6 < 3 else []
        changes += book.update("A", 0, 10, active, now=step)
    assert [a.state for a in changes] == [FIRING]


def test_needs_update_is_alertmanagers_dedup() -> None:
    assert needs_update(None, {"a"}, set(), 100, True, 0)
    assert not needs_update(None, set(), {"a"}, 100, True, 0)
    entry = LogEntry(frozenset({"a"}), frozenset(), 10)
    assert not needs_update(entry, {"a"}, set(), 100, True, 50)
    assert needs_update(entry, {"a", "b"}, set(), 100, True, 50)
    assert needs_update(entry, {"a"}, set(), 100, True, 111)  # repeat_interval
    assert needs_update(entry, set(), {"a"}, 100, True, 50)  # all resolved
    assert needs_update(LogEntry(frozenset({"a", "b"}), frozenset(), 10), {"a"}, {"b"}, 100, True, 50)
    assert not needs_update(LogEntry(frozenset({"a", "b"}), frozenset(), 10), {"a"}, {"b"}, 100, False, 50)


def test_group_key_format() -> None:
    assert group_key({"district": "110101", "alertname": "X"}) == '{}:{alertname="X", district="110101"}'


def make_dispatcher(group_wait: float = 5, group_interval: float = 30, repeat: float = 300) -> Dispatcher:
    route = Route(("alertname",), group_wait, group_interval, repeat)
    inhibit = (InhibitRule((Matcher("kind", "recognizer_degraded"),), (Matcher("device_ip", ".+", True),),
                           ("recognizer_ip",)),)
    return Dispatcher(route, [Receiver("hook", "webhook", url="http://x")], inhibit, NotificationLog())


def deliver_all(dispatcher: Dispatcher, notes: list) -> None:
    for note in notes:
        dispatcher.delivered(note, True)


def test_grouping_group_wait_interval_repeat_and_resolved() -> None:
    d = make_dispatcher()
    book = AlertBook()
    book.update("A", 0, 0, [cand(device_ip="1")], now=0)
    assert d.tick(book.notifiable(), [], 1) == []  # group_wait
    first = d.tick(book.notifiable(), [], 5)
    assert len(first) == 1 and [a.labels["device_ip"] for a in first[0].alerts] == ["1"]
    deliver_all(d, first)
    book.update("A", 0, 0, [cand(device_ip="1"), cand(device_ip="2")], now=10)
    assert d.tick(book.notifiable(), [], 10) == []  # waits for group_interval
    second = d.tick(book.notifiable(), [], 35)
    assert [a.labels["device_ip"] for a in second[0].alerts] == ["1", "2"]
    deliver_all(d, second)
    assert d.tick(book.notifiable(), [], 65) == []  # nothing new
    repeat = d.tick(book.notifiable(), [], 335 + 30)
    assert len(repeat) == 1
    deliver_all(d, repeat)
    book.update("A", 0, 0, [], now=400)
    done = d.tick(book.notifiable(), [], 400)
    assert done and done[0].firing == frozenset() and {a.state for a in done[0].alerts} == {RESOLVED}
    deliver_all(d, done)
    for t in (430, 460, 490):
        assert d.tick(book.notifiable(), [], t) == []  # resolved once, then the group is gone


def test_failed_delivery_is_retried_at_next_flush_and_in_flight_not_doubled() -> None:
    d = make_dispatcher()
    book = AlertBook()
    book.update("A", 0, 0, [cand(device_ip="1")], now=0)
    first = d.tick(book.notifiable(), [], 5)
    assert len(first) == 1
    assert d.tick(book.notifiable(), [], 35) == []  # still in flight
    d.delivered(first[0], False)
    again = d.tick(book.notifiable(), [], 65)
    assert len(again) == 1


def test_inhibition_mutes_devices_of_the_failing_recognizer_only() -> None:
    d = make_dispatcher(group_wait=0)
    book = AlertBook()
    book.update("D", 0, 0, [Candidate({"alertname": "D", "device_ip": "1", "recognizer_ip": "r1"}, {}),
                            Candidate({"alertname": "D", "device_ip": "2", "recognizer_ip": "r2"}, {})], now=0)
    book.update("R", 0, 0, [Candidate({"alertname": "R", "kind": "recognizer_degraded", "recognizer_ip": "r1"},
                                      {})], now=0)
    notes = d.tick(book.notifiable(), [], 0)
    sent = sorted(a.labels.get("device_ip", a.labels["alertname"]) for n in notes for a in n.alerts)
    assert sent == ["2", "R"]
    muted = [fp for fp, m in d.muting.items() if m.inhibited_by]
    assert [book.alerts[fp].labels["device_ip"] for fp in muted] == ["1"]


def test_silence_matchers_and_window() -> None:
    silence = new_silence([Matcher.parse('device_ip=~"10\\.0\\..*"'), Matcher.parse('severity!="critical"')],
                          100, 200, "admin", "maintenance")
    assert silence.mutes({"device_ip": "10.0.0.7", "severity": "warning"}, 150)
    assert not silence.mutes({"device_ip": "10.0.0.7", "severity": "critical"}, 150)
    assert not silence.mutes({"device_ip": "10.1.0.7", "severity": "warning"}, 150)
    assert not silence.mutes({"device_ip": "10.0.0.7", "severity": "warning"}, 200)
    with pytest.raises(ValueError, match="empty string"):
        new_silence([Matcher.parse('device_ip=~".*"')], 0, 1, "a", "b")
    d = make_dispatcher(group_wait=0)
    book = AlertBook()
    book.update("A", 0, 0, [cand(device_ip="10.0.0.7", severity="warning")], now=150)
    assert d.tick(book.notifiable(), [silence], 150) == []
    assert len(d.tick(book.notifiable(), [silence], 201)) == 1


def test_matcher_parse() -> None:
    m = Matcher.parse('alertname!~"Dev.*"')
    assert (m.name, m.value, m.is_regex, m.is_equal) == ("alertname", "Dev.*", True, False)
    assert Matcher.parse('x="a\\"b"').value == 'a"b'
    with pytest.raises(ValueError):
        Matcher.parse("alertname=Dev")


@pytest.mark.parametrize(("section", "message"), [
    ({"rules": [{"name": "Slow", "kind": "latency_p99"}]}, "rule 'Slow'.*'threshold' is missing"),
    ({"rules": [{"name": "Slow", "kind": "latency", "threshold": 1}]}, "rule 'Slow'.*'kind' should be one of"),
    ({"rules": [{"name": "Q", "kind": "device_quality", "threshold": 20}]}, "rule 'Q'.*'threshold' is a share"),
    ({"rules": [{"name": "Q", "kind": "device_quality", "threshold": 0.2, "for_s": -1}]}, "rule 'Q'.*'for_s'"),
    ({"rules": [{"name": "Q", "kind": "device_quality", "threshold": 0.2, "fro_s": 1}]}, "rule 'Q'.*'fro_s'"),
    ({"rules": [{"name": "Q", "kind": "device_silent", "threshold": 1, "severity": "urgent"}]}, "'severity'"),
    ({"receivers": [{"name": "w", "type": "webhook"}]}, "receiver 'w'.*'url'"),
    ({"receivers": [{"name": "m", "type": "smtp", "host": "h", "from": "a@b"}]}, "receiver 'm'.*'to'"),
    ({"route": {"receivers": ["nobody"]}}, "'receivers' names 'nobody'"),
    ({"inhibit_rules": [{"source_matchers": ["kind=x"]}]}, "not a matcher"),
    ({"metrics_host": ""}, "'metrics_host' should be a non-empty string"),
])
def test_bad_config_names_rule_and_field(section: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse(section)
