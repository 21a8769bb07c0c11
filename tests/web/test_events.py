"""The SSE hub through a real console: fan-out to 200 pages, topic filters, closed pages removed, malformed
records counted while every page's stream and every fold goes on."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import fields
from typing import Any

import httpx
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from contracts.alerts import FIRING, alert_record, fingerprint
from contracts.ingest_stats import BatchTally, stats_record
from contracts.records import now_time
from contracts.surveillance import ACCEPTED, reply_record, stat_from_json, watch_from_json
from contracts.topics import Topics
from deploy.processes.console import ConsoleProcess, password_of
from testkit.raw_kafka import RawKafka, produce_error
from tests.web._bad_records import UNWRITABLE_JSON, WRONG_SHAPES, skipped_counts, undecompressible_batch
from web.events import Subscription, decode_value, hub_topics

HITS = "surveillance.hits"
STATUS = "video.status"


def sse_clients(console: ConsoleProcess) -> int:
    text = httpx.get(f"{console.url}/metrics").text
    match = re.search(r"^console_sse_clients (\S+)$", text, re.M)
    assert match, "console_sse_clients gauge missing"
    return int(float(match.group(1)))


def wait_for_clients(console: ConsoleProcess, count: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while (seen := sse_clients(console)) != count:
        assert time.monotonic() < deadline, f"{seen} SSE clients, expected {count}"
        time.sleep(0.1)


def produce(console: ConsoleProcess, topic: str, value: dict[str, Any] | bytes, key: bytes | None = None) -> None:
    producer = Producer({"bootstrap.servers": console.backing.broker.bootstrap})
    producer.produce(topic, value if isinstance(value, bytes) else json.dumps(value).encode(), key=key)
    assert producer.flush(10) == 0


async def read_events(response: httpx.Response, until: str, events: list[tuple[str, dict[str, Any]]]) -> None:
    """Append ``(event, data)`` pairs until one whose data contains ``until``."""
    event = None
    async for line in response.aiter_lines():
        if line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:") and event:
            data = json.loads(line[5:].strip())
            events.append((event, data))
            if until in line:
                return


async def hub_follows(console: ConsoleProcess, topic: str) -> None:
    """Produce probes until one page sees one: the hub has found the topic (it looks every few seconds)."""
    headers = {"Authorization": f"Bearer {console.token('viewer')}"}
    async with httpx.AsyncClient(base_url=console.url, headers=headers, timeout=60) as client, \
            client.stream("GET", f"/api/v1/events?topics={topic}") as response:
        assert response.status_code == 200
        marker = f"probe-{uuid.uuid4().hex}"
        events: list[tuple[str, dict[str, Any]]] = []
        reader = asyncio.create_task(read_events(response, marker, events))
        while not reader.done():
            await asyncio.to_thread(produce, console, topic, {"probe": marker})
            await asyncio.wait([reader], timeout=1)
        await reader


def test_200_pages_each_get_the_event_and_leave_no_trace(console: ConsoleProcess) -> None:
    token = console.token("viewer")

    async def scenario() -> list[float]:
        await hub_follows(console, HITS)
        limits = httpx.Limits(max_connections=250, max_keepalive_connections=0)
        async with httpx.AsyncClient(base_url=console.url, headers={"Authorization": f"Bearer {token}"},
                                     timeout=60, limits=limits) as client:
            marker = f"hit-{uuid.uuid4().hex}"
            received: list[float] = []

            async def page() -> None:
                async with client.stream("GET", f"/api/v1/events?topics={HITS}") as response:
                    assert response.status_code == 200
                    events: list[tuple[str, dict[str, Any]]] = []
                    await read_events(response, marker, events)
                    received.append(time.monotonic())
                    assert events[-1] == (HITS, {"plate_number": "粤B12345", "marker": marker, "topic": HITS})

            pages = [asyncio.create_task(page()) for _ in range(200)]
            await asyncio.to_thread(wait_for_clients, console, 200)
            sent = time.monotonic()
            await asyncio.to_thread(produce, console, HITS, {"plate_number": "粤B12345", "marker": marker})
            await asyncio.wait_for(asyncio.gather(*pages), 60)
            return [t - sent for t in received]

    delays = asyncio.run(scenario())
    assert len(delays) == 200
    print(f"200 pages: slowest received the event {max(delays) * 1000:.0f} ms after produce")
    wait_for_clients(console, 0, timeout=10)


def test_a_closed_page_is_removed_at_once(console: ConsoleProcess) -> None:
    with console.client("viewer").stream("GET", "/api/v1/events") as response:
        assert response.status_code == 200
        wait_for_clients(console, 1)
    wait_for_clients(console, 0, timeout=3)


def test_topic_filter_and_cookie_auth(console: ConsoleProcess) -> None:
    async def scenario() -> list[tuple[str, dict[str, Any]]]:
        await hub_follows(console, STATUS)
        await hub_follows(console, HITS)
        async with httpx.AsyncClient(base_url=console.url, timeout=60) as browser:
            login = await browser.post("/api/v1/auth/session",
                                       data={"username": "viewer", "password": password_of("viewer")})
            assert login.status_code == 200
            async with browser.stream("GET", f"/api/v1/events?topics={STATUS}") as response:
                assert response.status_code == 200
                events: list[tuple[str, dict[str, Any]]] = []
                reader = asyncio.create_task(read_events(response, "last-one", events))
                await asyncio.to_thread(wait_for_clients, console, 1)
                await asyncio.to_thread(produce, console, HITS, {"not": "wanted"})
                await asyncio.to_thread(produce, console, STATUS, b"plain text, not JSON")
                await asyncio.to_thread(produce, console, STATUS, {"task_id": "last-one"})
                await asyncio.wait_for(reader, 30)
                return events

    events = asyncio.run(scenario())
    assert events == [(STATUS, {"value": "plain text, not JSON", "topic": STATUS}),
                      (STATUS, {"task_id": "last-one", "topic": STATUS})]


def test_unknown_topic_is_422_naming_the_field(console: ConsoleProcess) -> None:
    response = console.client("viewer").get("/api/v1/events?topics=capture.vehicle")
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["query", "topics"]
    assert "capture.vehicle" in response.json()["detail"][0]["msg"]


def test_a_full_queue_drops_the_oldest_and_counts() -> None:
    subscription = Subscription(frozenset({"t"}), size=3)
    for n in range(5):
        subscription.put("t", str(n))
    assert [data for _topic, data in subscription.queue] == ["2", "3", "4"]
    assert subscription.dropped == 2


# -- malformed records ---------------------------------------------------------------------------------
WINDOW = {"window_start": "2026-03-02T09:00:00.000+08:00", "window_end": "2026-03-02T09:01:00.000+08:00"}


def _is_object(raw: bytes) -> bool:
    """Whether the console reads `raw` as a JSON object (strict JSON: what it shows as text is none)."""
    return isinstance(decode_value(raw)[0], dict)


def _records(topics: Topics, run: str) -> dict[str, list[tuple[bytes, bytes]]]:
    """Per hub topic, keyed (the control topics are compacted): garbage, the wrong JSON shapes, JSON the parser
    cannot take or write back, a valid-looking record with fields missing (for replies, one about the good
    watch: it must stay pending), then a good record holding ``good-<run>``."""
    t, good = topics, f"good-{run}"
    watch_id, stat_id = f"watch-{run}", f"stat-{run}"
    missing: dict[str, dict[str, Any]] = {
        t.alerts: {"labels": {"alertname": run}, "annotations": {}},
        t.ingest_stats: {"job": run, "batch_id": 1, "window_s": 2.0},
        t.control_watchlist: {"watch_id": f"bad-{run}", "kind": "plate"},
        t.control_stats: {"stat_id": f"bad-{run}", "measure": "vehicle_count"},
        t.surveillance_replies: {"id": watch_id, "command": "watch"},
        t.surveillance_stats: {"stat_id": stat_id, **WINDOW},
        t.surveillance_hits: {"hit_id": run}, t.video_status: {"task_id": run},
        t.deadletter: {"record_id": run}, t.heartbeat: {"device_ip": run}}
    labels = {"alertname": good}
    watch = {"watch_id": watch_id, "kind": "plate", "plate": "浙A12345", "reason": good}
    stat = {"stat_id": stat_id, "measure": "vehicle_count", "group_by": "city", "window_s": 60, "requested_by": good}
    valid: dict[str, tuple[str, dict[str, Any]]] = {
        t.alerts: (fingerprint(labels), alert_record(FIRING, labels, {}, time.time())),
        t.ingest_stats: (good, stats_record(good, 1, now_time(), 2.0, 0.1, BatchTally())),
        t.control_watchlist: (watch_id, watch_from_json(watch).to_json()),
        t.control_stats: (stat_id, stat_from_json(stat).to_json()),
        t.surveillance_replies: (stat_id, reply_record(stat_id, "stat", ACCEPTED, "", now_time(), good)),
        # A result of a statistic not running here (the statistic's own results are sent once it is listed).
        t.surveillance_stats: ("other", {"stat_id": "other", **WINDOW, "group": good, "value": 1, "final": True}),
        **{topic: (good, {"marker": good}) for topic in (t.surveillance_hits, t.video_status, t.deadletter,
                                                          t.heartbeat)}}
    return {topic: [(f"bad-{run}-{n}".encode(), value) for n, value in
                    enumerate((*WRONG_SHAPES, *UNWRITABLE_JSON, json.dumps(missing[topic]).encode()))]
            + [(valid[topic][0].encode(), json.dumps(valid[topic][1]).encode())]
            for topic in hub_topics(topics)}


def _produce(bootstrap: str, records: dict[str, list[tuple[bytes, bytes]]], compacted: set[str]) -> None:
    """Each topic's records in order, and before its good (last) one a batch librdkafka cannot read (not on the
    compacted topics: the broker decodes what they get, and refuses it)."""
    producer = Producer({"bootstrap.servers": bootstrap})
    with RawKafka(bootstrap, timeout=10) as raw:
        for topic, values in records.items():
            for key, value in values[:-1]:
                producer.produce(topic, value, key=key)
            assert producer.flush(10) == 0
            if topic not in compacted:
                assert produce_error(raw, topic, 0, undecompressible_batch(3))[0] == 0
            key, value = values[-1]
            producer.produce(topic, value, key=key)
        assert producer.flush(10) == 0


def _shown(topic: str, raw: bytes) -> dict[str, Any]:
    """What a page gets for one of these records: an object as it is, other JSON under ``value``, what is not
    JSON (or could not be written back as JSON) as text under ``value``, what is not UTF-8 as base64."""
    try:
        value = raw.decode() if raw in UNWRITABLE_JSON else json.loads(raw)
    except ValueError:
        return {"base64": base64.b64encode(raw).decode(), "topic": topic}
    return {**value, "topic": topic} if isinstance(value, dict) else {"value": value, "topic": topic}


async def _read_until(response: httpx.Response, marker: str, topics: set[str],
                      events: list[tuple[str, dict[str, Any]]]) -> None:
    """Append ``(event, data)`` until each of ``topics`` has sent an event holding ``marker``."""
    event = None
    async for line in response.aiter_lines():
        if line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:") and event:
            events.append((event, json.loads(line[5:].strip())))
            if marker in line:
                topics.discard(event)
                if not topics:
                    return


def _until(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)
    return found


def _fold_counts(console: ConsoleProcess) -> dict[tuple[str, str], float]:
    """Records the overview's and the watchlist's folds set aside: (topic, reader) -> count, any reason."""
    text = httpx.get(f"{console.url}/metrics").text
    totals: dict[tuple[str, str], float] = {}
    for reader in ("overview", "surveillance"):
        for (topic, _reason), count in skipped_counts(text, reader).items():
            totals[(topic, reader)] = totals.get((topic, reader), 0) + count
    return totals


def test_malformed_records_are_counted_and_every_stream_and_fold_goes_on(
        console: ConsoleProcess, make_console: Callable[..., ConsoleProcess]) -> None:
    """On every hub topic, bad records then a good one, through a console on topics of this test's own: pages
    get every record (the bad ones as text or base64; a batch that does not decompress is stepped past) on
    streams that go on, the folds (overview, watchlist, statistics) take the good ones and answer, every
    reader counts what it set aside, and a console started later reads them all as history."""
    run = uuid.uuid4().hex[:12]
    renamed = {f.name: f"{getattr(Topics(), f.name)}.{run}" for f in fields(Topics)}
    t = topics = Topics(**renamed)
    watched = hub_topics(topics)
    live = make_console(topics=renamed)
    # Created after the console started, so that its hub reads them from their beginning whenever it finds them.
    admin = AdminClient({"bootstrap.servers": console.backing.broker.bootstrap})
    compacted = {t.control_watchlist, t.control_stats}  # as the console creates them
    for future in admin.create_topics([NewTopic(topic, 1, 1, config={"cleanup.policy": "compact"} if topic in
                                                compacted else {}) for topic in watched]).values():
        future.result(30)
    records = _records(topics, run)
    token = live.token("viewer")

    async def pages() -> tuple[list[tuple[str, dict[str, Any]]], list[tuple[str, dict[str, Any]]]]:
        async with httpx.AsyncClient(base_url=live.url, headers={"Authorization": f"Bearer {token}"},
                                     timeout=60) as client, \
                client.stream("GET", "/api/v1/events", params={"topics": ",".join(watched)}) as every, \
                client.stream("GET", "/api/v1/events", params={"topics": t.video_status}) as one:
            assert every.status_code == 200 and one.status_code == 200
            seen_every: list[tuple[str, dict[str, Any]]] = []
            seen_one: list[tuple[str, dict[str, Any]]] = []
            readers = asyncio.gather(_read_until(every, f"good-{run}", set(watched), seen_every),
                                     _read_until(one, f"good-{run}", {t.video_status}, seen_one))
            await asyncio.to_thread(wait_for_clients, live, 2)
            await asyncio.to_thread(_produce, live.backing.broker.bootstrap, records, compacted)
            await asyncio.wait_for(readers, 60)
            return seen_every, seen_one

    seen_every, seen_one = asyncio.run(pages())
    for topic in watched:
        assert [data for event, data in seen_every if event == topic] == [_shown(topic, v) for _, v in records[topic]]
    assert seen_one == [(t.video_status, _shown(t.video_status, v)) for _, v in records[t.video_status]]

    # The statistic is listed now: its results, two of them malformed.
    stat_id, watch_id = f"stat-{run}", f"watch-{run}"
    result = {"stat_id": stat_id, **WINDOW, "group": "city", "value": 3, "final": True}
    producer = Producer({"bootstrap.servers": live.backing.broker.bootstrap})
    for value in ({"stat_id": stat_id, **WINDOW}, {**result, "value": "three", "final": "maybe"}, result):
        producer.produce(t.surveillance_stats, json.dumps(value).encode(), key=stat_id.encode())
    assert producer.flush(10) == 0

    # The JSON objects among the bad watch commands (unrelated keys, fields missing) are listed as rejected, as the
    # service rejects them; what is not a JSON object is not listed.
    rejected_watches = [(f"bad-{run}-{n}", "rejected") for n, (_key, value) in enumerate(records[t.control_watchlist])
                        if n < len(records[t.control_watchlist]) - 1 and _is_object(value)]

    def folded(console: ConsoleProcess, batches: int | None) -> bool:
        """Every answer a 200 that fits its model, and the good records folded."""
        viewer = console.client("viewer")
        answers = [viewer.get(path) for path in ("/api/v1/watchlist", "/api/v1/stats", "/api/v1/overview")]
        assert [a.status_code for a in answers] == [200, 200, 200], [a.text for a in answers]
        watches, stats, overview = (a.json() for a in answers)
        results = viewer.get(f"/api/v1/stats/{stat_id}/results")
        return (watches["complete"] and [(w["watch_id"], w["status"]) for w in watches["items"]] == [
                    *rejected_watches, (watch_id, "pending")]
                and [(s["stat_id"], s["status"]) for s in stats] == [(stat_id, ACCEPTED)]
                and results.status_code == 200
                and results.json()["results"] == [{**result, "checkpoint_id": None, "lane": None}]  # not a lane
                and overview["open_alerts"] == 1 and batches in (None, overview["ingest"]["batches"]))

    _until(lambda: folded(live, batches=1), 30, "the folds")
    bad = len(WRONG_SHAPES) + len(UNWRITABLE_JSON) + 1
    assert skipped_counts(httpx.get(f"{live.url}/metrics").text, "events") == {
        (topic, reason): count for topic in watched
        for reason, count in (("not UTF-8", 1), ("not JSON", len(UNWRITABLE_JSON)), ("not a JSON object", 2),
                              ("unreadable batch", 0 if topic in compacted else 1)) if count}
    folds = {(t.ingest_stats, "overview"): bad, (t.alerts, "overview"): bad,
             (t.control_watchlist, "surveillance"): bad, (t.control_stats, "surveillance"): bad,
             (t.surveillance_replies, "surveillance"): bad, (t.surveillance_stats, "surveillance"): bad + 2}
    assert _fold_counts(live) == folds

    # A console started now reads the control topics, the alerts and the last hour's results as history, bad
    # records too (ingest.stats only for the last minute: a slow start may miss it).
    later = make_console(topics=renamed)
    _until(lambda: folded(later, batches=None), 30, "the folds of the console started later")
    del folds[(t.ingest_stats, "overview")]
    assert {k: v for k, v in _fold_counts(later).items() if k[0] != t.ingest_stats} == folds
