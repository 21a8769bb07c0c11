"""The ``alertmanager`` receiver's payload and timing on a fake clock (Prometheus' resend and ``endsAt``
convention), its failure bookkeeping against a real local HTTP server, and its config checks."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from threading import Thread
from typing import Any

import pytest
from prometheus_client import REGISTRY

from contracts.alerts import rfc3339
from contracts.ports import free_port
from contracts.processes import ROOT
from monitoring.alertmanager import AlertmanagerSender, SendBook, alerts_url, api_alert, valid_until
from monitoring.alerts import FIRING, PENDING, RESOLVED, Alert, AlertBook, Candidate
from monitoring.config import ConfigError, Receiver, console_alertmanager_url, parse
from web.backends import BackendUnavailable
from web.services.monitoring import alertmanager_alerts

LABELS = {"alertname": "DeviceSilent", "severity": "critical", "kind": "device_silent", "device_ip": "10.0.0.1",
          "recognizer_ip": "r1", "district": "110100", "checkpoint_id": "110100#0#0#0", "crossroad": "0"}
T0 = 1_700_000_000.0


def firing(fired_at: float = T0, **labels: str) -> Alert:
    return Alert("DeviceSilent", {**LABELS, **labels}, {"summary": "silent"}, FIRING, fired_at, fired_at,
                 fired_at=fired_at)


class Clock:
    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_firing_alert_is_postable_alert_with_ends_at_four_resend_delays_ahead() -> None:
    body = api_alert(firing(), now=T0 + 30, resend_s=60, evaluation_interval_s=5, generator_url="http://console/alerts")
    assert body == {"labels": LABELS, "annotations": {"summary": "silent"}, "startsAt": rfc3339(T0),
                    "endsAt": rfc3339(T0 + 30 + 240), "generatorURL": "http://console/alerts"}
    assert body["startsAt"] == "2023-11-14T22:13:20.000Z"
    # evaluation slower than the resend delay: 4 evaluations (Prometheus: 4 * max(resend delay, interval))
    assert valid_until(T0, resend_s=60, evaluation_interval_s=90) == T0 + 360
    assert "generatorURL" not in api_alert(firing(), T0, 60, 5)


def test_resolved_alert_ends_at_its_resolution_time() -> None:
    alert = firing()
    alert.state, alert.resolved_at = RESOLVED, T0 + 100
    body = api_alert(alert, now=T0 + 500, resend_s=60, evaluation_interval_s=5)
    assert body["startsAt"] == rfc3339(T0) and body["endsAt"] == rfc3339(T0 + 100)


def test_firing_alert_resent_never_more_than_resend_s_apart() -> None:
    book = SendBook(resend_s=60, evaluation_interval_s=5)
    alert = firing()
    sends = []
    for step in range(0, 400, 5):  # an evaluation every 5 s for 400 s, every send acknowledged
        now = T0 + step
        due = book.due([alert], now)
        if due:
            sends.append(step)
            book.acknowledged(due, now)
    gaps = [b - a for a, b in itertools.pairwise(sends)]
    assert sends[0] == 0 and gaps and all(55 <= g <= 60 for g in gaps), sends
    # and each send keeps it alive in Alertmanager past the next one, with three sends to spare
    assert all(valid_until(T0 + s, 60, 5) >= T0 + s + 4 * g for s, g in zip(sends, gaps, strict=False))


def test_resolution_sent_once_and_new_incident_sent_at_once() -> None:
    book = SendBook(resend_s=60, evaluation_interval_s=5)
    alert = firing()
    book.acknowledged(book.due([alert], T0), T0)
    assert book.due([alert], T0 + 5) == []
    alert.state, alert.resolved_at = RESOLVED, T0 + 10
    assert book.due([alert], T0 + 10) == [alert]
    assert book.due([alert], T0 + 15) == [alert]  # not acknowledged yet: still due
    book.acknowledged([alert], T0 + 15)
    assert all(book.due([alert], T0 + t) == [] for t in (20, 100, 1000))
    again = firing(fired_at=T0 + 50)  # same labels, a new incident
    assert book.due([again], T0 + 50) == [again]


def test_pending_alerts_are_never_sent_and_forgotten_alerts_leave_the_book() -> None:
    book = SendBook(resend_s=60, evaluation_interval_s=5)
    pending = Alert("DeviceSilent", dict(LABELS), {}, PENDING, T0, T0)
    assert book.due([pending], T0) == []
    alert = firing()
    book.acknowledged([alert], T0)
    book.forget_except(set())
    assert book.sent == {}


def test_only_firing_and_resolved_alerts_of_a_real_book_are_offered() -> None:
    book = AlertBook()
    book.update("A", 10, 0, [Candidate({"alertname": "A", "device_ip": "1"}, {})], now=T0)
    assert book.notifiable() == []  # pending
    sender = AlertmanagerSender(Receiver("am", "alertmanager", url="http://127.0.0.1:1"), 5, clock=Clock())
    assert sender.book.due(book.notifiable(), T0) == []


class Recorder:
    """A real HTTP server answering like Alertmanager (200) or like a broken one (``status``)."""

    def __init__(self) -> None:
        self.posts: list[list[dict[str, Any]]] = []
        self.listed: list[dict[str, Any]] = []
        self.status = 200
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path == "/api/v2/alerts" and recorder.status == 200:
                    recorder.posts.append(body)
                self.send_response(recorder.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_GET(self) -> None:
                body = json.dumps(recorder.listed).encode()
                self.send_response(recorder.status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    server = Recorder()
    yield server
    server.close()


def sample(name: str, receiver: str) -> float:
    return REGISTRY.get_sample_value(name, {"receiver": receiver}) or 0.0


def test_unreachable_or_failing_alertmanager_keeps_everything_for_the_next_evaluation(recorder: Recorder) -> None:
    clock = Clock()
    dead = Receiver("am-unit", "alertmanager", url=f"http://127.0.0.1:{free_port()}", timeout_s=1, resend_s=60)
    sender = AlertmanagerSender(dead, 5, clock=clock)
    one, two = firing(), firing(device_ip="10.0.0.2")
    failures = sample("monitor_notification_failures_total", "am-unit")
    assert sender.send([one, two]) == 0  # connection refused: nothing lost
    assert sender.reachable is False and "refused" in sender.last_error.lower()
    assert sample("monitor_alertmanager_up", "am-unit") == 0
    assert sample("monitor_alertmanager_unsent_alerts", "am-unit") == 2
    assert sample("monitor_notification_failures_total", "am-unit") == failures + 1

    recorder.status = 503  # answering, but failing: still kept
    sender.url = alerts_url(recorder.url)
    clock.t += 5
    assert sender.send([one, two]) == 0 and "503" in sender.last_error

    recorder.status = 200  # back: both at the next evaluation, then nothing until the re-send is due
    clock.t += 5
    assert sender.send([one, two]) == 2 and sender.reachable is True
    assert sample("monitor_alertmanager_up", "am-unit") == 1
    assert sample("monitor_alertmanager_unsent_alerts", "am-unit") == 0
    [posted] = recorder.posts
    assert [a["labels"]["device_ip"] for a in posted] == ["10.0.0.1", "10.0.0.2"]
    assert {a["endsAt"] for a in posted} == {rfc3339(clock.t + 240)}
    clock.t += 50
    assert sender.send([one, two]) == 0
    clock.t += 5
    assert sender.send([one, two]) == 2


def test_offer_does_not_wait_for_a_dead_alertmanager() -> None:
    """A posting thread busy with a dead address: offers return at once and only the newest is kept."""
    sender = AlertmanagerSender(Receiver("am-offer", "alertmanager", url="http://10.255.255.1:9", timeout_s=2), 0.5)
    sender.start()
    try:
        started = time.monotonic()
        for _ in range(50):
            sender.offer([firing()])
        assert time.monotonic() - started < 0.5
    finally:
        sender.close(timeout=5)


def section(receiver: dict[str, Any], route: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"receivers": [{"name": "am", "type": "alertmanager", **receiver}], **({"route": route} if route else {})}


def test_config_takes_base_url_timeout_and_resend() -> None:
    cfg = parse(section({"url": "http://127.0.0.1:9093/", "timeout_s": 2, "resend_s": 30}))
    assert cfg.receivers == (Receiver("am", "alertmanager", url="http://127.0.0.1:9093", timeout_s=2, resend_s=30),)
    assert parse(section({"url": "https://am.example/prefix"})).receivers[0].resend_s == 60
    assert alerts_url("http://am.example/prefix") == "http://am.example/prefix/api/v2/alerts"


@pytest.mark.parametrize(("receiver", "message"), [
    ({}, "field 'url' should be a non-empty string"),
    ({"url": "127.0.0.1:9093"}, "base address http(s)://host:port"),
    ({"url": "ftp://127.0.0.1:9093"}, "base address http(s)://host:port"),
    ({"url": "http://"}, "base address http(s)://host:port"),
    ({"url": "http://127.0.0.1:99999"}, "is not a URL"),
    ({"url": "http://127.0.0.1:9093/api/v2/alerts"}, "the monitor adds /api/v2/alerts"),
    ({"url": "http://127.0.0.1:9093", "to": ["x"]}, "unknown field 'to'"),
    ({"url": "http://127.0.0.1:9093", "resend_s": 0}, "'resend_s' should be a number >= 0.1"),
])
def test_bad_alertmanager_receiver_is_named(receiver: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse(section(receiver))
    assert "receiver 'am'" in str(caught.value) and message in str(caught.value)


def test_route_cannot_name_an_alertmanager_receiver() -> None:
    with pytest.raises(ConfigError, match="an alertmanager receiver"):
        parse(section({"url": "http://127.0.0.1:9093"}, {"receivers": ["am"]}))


def test_console_finds_the_alertmanager_in_a_raw_monitoring_section() -> None:
    assert console_alertmanager_url(section({"url": "http://am:9093/"})) == "http://am:9093"
    assert console_alertmanager_url({"receivers": [{"name": "w", "type": "webhook", "url": "http://x"}]}) == ""
    assert console_alertmanager_url({"receivers": "junk"}) == ""


def test_bad_url_stops_the_monitor_at_start(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text('[[monitoring.receivers]]\nname = "ops"\ntype = "alertmanager"\nurl = "localhost:9093"\n')
    done = subprocess.run([sys.executable, "-m", "monitoring", "--config", str(config)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "receiver 'ops'" in done.stderr and "'url'" in done.stderr and "localhost:9093" in done.stderr


def test_console_reads_alertmanager_alerts_in_its_shape(recorder: Recorder) -> None:
    """Alertmanager's ``gettableAlert`` (as 0.25 answers) becomes the console's alert; unreachable: a 503 backend."""
    recorder.listed = [
        {"annotations": {"summary": "s"}, "endsAt": "2026-11-29T12:31:36.155Z", "fingerprint": "bfd3914a3da1a9fd",
         "receivers": [{"name": "hook"}], "startsAt": "2026-11-29T12:27:36.154+00:00",
         "status": {"inhibitedBy": [], "silencedBy": [], "state": "unprocessed"},
         "updatedAt": "2026-11-29T12:27:36.156Z", "labels": {"alertname": "DeviceSilent"}},
        {"annotations": {}, "endsAt": "2026-11-29T12:31:36.155Z", "fingerprint": "0000000000000001",
         "receivers": [], "startsAt": "2026-11-29T12:00:00.000Z",
         "status": {"inhibitedBy": [], "silencedBy": ["id-1"], "state": "suppressed"}, "labels": {"alertname": "B"}},
    ]
    first, second = alertmanager_alerts(recorder.url, 2)
    assert first == {"fingerprint": "0000000000000001", "labels": {"alertname": "B"}, "annotations": {},
                     "status": {"state": "suppressed", "silencedBy": ["id-1"], "inhibitedBy": []},
                     "startsAt": "2026-11-29T12:00:00.000Z", "endsAt": "2026-11-29T12:31:36.155Z"}
    assert second["status"]["state"] == "active" and second["startsAt"] == "2026-11-29T12:27:36.154Z"
    recorder.status = 500
    with pytest.raises(BackendUnavailable, match="answered 500") as caught:
        alertmanager_alerts(recorder.url, 2)
    assert caught.value.backend == "alertmanager"
    with pytest.raises(BackendUnavailable, match="alertmanager unavailable"):
        alertmanager_alerts(f"http://127.0.0.1:{free_port()}", 2)
