"""Every read of personal data through the console API leaves exactly one audit event, recorded before the read.

Against real consoles, brokers and HBase gateways: each read is made as ``viewer`` with a unique reason (the
marker the audit page's ``q`` finds), then the trail must hold one entry for it with the user, role, action,
target, the query as asked (never the answer), the client address, the user agent and the reason. The audit
topic has one partition and the loader writes it in order, so once a *sentinel* read made after all the others
shows on the page, every event recorded before it shows too: a count of exactly one (or none) is then final.
"""

from __future__ import annotations

import datetime as dt
import secrets
import string
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from contracts.audit import REASON_MAX
from contracts.records import CITY_TZ
from deploy.processes.broker import BrokerProcess
from deploy.processes.console import Backing, ConsoleProcess, start_console
from ingest.city import build_city
from tests.web._video_support import VideoSite, load_task, video_site
from tests.web.conftest import MAP_CHECKPOINTS, MAP_SEED
from tests.web.test_face_search import wait_ready
from video import storage

__all__ = ["video_site"]  # the fixture, imported for pytest

HITS = "surveillance.hits"
CHECKPOINT = "330102#1#0#0"
DISTRICT = CHECKPOINT.split("#")[0]
Read = Callable[[httpx.Client, str], httpx.Response]
"""A read made with a client and its marker (the reason); the expected entry is listed with it."""


def marker(what: str) -> str:
    return f"{what}-{uuid.uuid4().hex[:12]}"


def unique_plate() -> str:
    """A valid plate no other test searches for (so 'nothing audited for it' is meaningful)."""
    return "浙A" + "".join(secrets.choice(string.ascii_uppercase + string.digits) for _ in range(5))


def settled(console: ConsoleProcess) -> None:
    """Make one more audited read and wait until it shows: every event recorded before it is on the page now."""
    sentinel = marker("sentinel")
    assert console.client("viewer").get("/api/v1/watchlist", params={"reason": sentinel}).status_code == 200
    console.audit(until=lambda entries: len(entries) == 1, q=sentinel)


def entries_for(console: ConsoleProcess, text: str, **filters: str) -> list[dict[str, Any]]:
    """The entries (settled) whose target, query or reason contains ``text``."""
    return console.audit(until=lambda _entries: True, q=text, **filters)


def the_entry(console: ConsoleProcess, reason: str) -> dict[str, Any]:
    """The one entry read with ``reason``, checked for what every read records about its caller."""
    found = entries_for(console, reason)
    assert len(found) == 1, found
    entry = found[0]
    assert (entry["user"], entry["role"], entry["client"], entry["outcome"]) == ("viewer", "viewer", "127.0.0.1", "ok")
    assert entry["user_agent"].startswith("python-httpx/") and entry["reason"] == reason
    return entry


# -- the matrix on the shared console --------------------------------------------------------------------------

def _sse(topics: str) -> Read:
    def read(client: httpx.Client, reason: str) -> httpx.Response:
        params = {"topics": topics, "reason": reason}
        with client.stream("GET", "/api/v1/events", params=params, timeout=10) as response:
            return response  # the status is all we need: the event is recorded before the stream starts

    return read


def _get(path: str, **params: Any) -> Read:
    return lambda client, reason: client.get(path, params={**params, "reason": reason})


def _face_search(**body: Any) -> Read:
    def read(client: httpx.Client, reason: str) -> httpx.Response:
        wait_ready(client)  # until the console's face index is built the answer is 503, and nothing is read
        return client.post("/api/v1/captures/faces/similar", json={**body, "reason": reason})

    return read


MATRIX: list[tuple[str, Read, tuple[int, ...], str, str, dict[str, Any]]] = [
    # (name, read, statuses, action, target, query)
    ("plate", _get("/api/v1/captures", plate="浙AWL999", start="2026-03-02T08:00:00+08:00", limit=5), (200,),
     "captures.search", "浙AWL999", {"plate": "浙AWL999", "start": "2026-03-02T08:00:00+08:00", "limit": 5}),
    ("checkpoint", _get("/api/v1/captures", checkpoint=CHECKPOINT, end="2026-03-03T00:00:00Z"), (200,),
     "captures.by_checkpoint", CHECKPOINT,
     {"checkpoint": CHECKPOINT, "end": "2026-03-03T00:00:00+00:00", "limit": 50}),
    ("detail", _get("/api/v1/captures/vehicle/10.9.9.9-77"), (404,),  # asked for, even if not found
     "captures.detail", "10.9.9.9-77", {"kind": "vehicle"}),
    ("watchlist", _get("/api/v1/watchlist", limit=7, kind="plate"), (200,),
     "watchlist.read", "", {"limit": 7, "kind": "plate"}),
    ("watch hits", _get("/api/v1/watchlist/plate-nobody/hits", limit=3), (404,),
     "hits.read", "plate-nobody", {"limit": 3}),
    ("recent hits", _get("/api/v1/hits", limit=4), (200,), "hits.read", "", {"limit": 4}),
    ("messages", _get("/api/v1/bus/topics/audit/messages", limit=2, partition=0), (200,),
     "topic.messages", "audit", {"limit": 2, "partition": 0}),
    ("vehicles", _get("/api/v1/captures/vehicles", district=DISTRICT, vehicle_color="white", limit=5,
                      **{"from": "2026-03-02T08:00:00+08:00", "to": "2026-03-02T09:00:00+08:00"}), (200,),
     "captures.vehicle_search", DISTRICT, {"from": "2026-03-02T00:00:00+00:00", "to": "2026-03-02T01:00:00+00:00",
                                           "district": DISTRICT, "vehicle_color": "white", "limit": 5}),
    ("faces", _face_search(capture="10.9.9.9-78", **{"from": "2026-03-02T08:00:00+08:00",
                                                    "to": "2026-03-02T09:00:00+08:00"}), (404,),  # asked for
     "captures.face_search", "10.9.9.9-78", {"from": "2026-03-02T08:00:00+08:00", "to": "2026-03-02T09:00:00+08:00",
                                             "min_score": 0.8, "limit": 100}),
    ("events", _sse(f"{HITS},video.status"), (200,),
     "events.subscribe", HITS, {"topics": [HITS, "video.status"]}),
]


def test_every_read_of_personal_data_is_audited_once_with_who_what_and_why(console: ConsoleProcess) -> None:
    viewer = console.client("viewer")
    reasons = {}
    for name, read, statuses, *_expected in MATRIX:
        reasons[name] = marker(name.replace(" ", "-"))
        response = read(viewer, reasons[name])
        assert response.status_code in statuses, (name, response.status_code)
    settled(console)
    wrong = []
    for name, _read, _statuses, action, target, query in MATRIX:
        entry = the_entry(console, reasons[name])
        if (entry["action"], entry["target"], entry["query"]) != (action, target, query):
            wrong.append((name, entry))
    assert not wrong


def test_a_stream_without_hits_is_not_a_read_of_personal_data(console: ConsoleProcess) -> None:
    reason = marker("status-only")
    assert _sse("video.status")(console.client("viewer"), reason).status_code == 200
    settled(console)
    assert entries_for(console, reason) == []


@pytest.mark.parametrize(("reason", "why"), [(None, "missing"), ("   ", "blank"), ("x" * (REASON_MAX + 1), "long")])
def test_a_plate_search_without_a_reason_is_422_naming_reason_and_not_audited(console: ConsoleProcess,
                                                                              reason: str | None, why: str) -> None:
    plate = unique_plate()
    params = {"plate": plate, **({"reason": reason} if reason is not None else {})}
    response = console.client("viewer").get("/api/v1/captures", params=params)
    assert response.status_code == 422, (why, response.text)
    assert [e["loc"] for e in response.json()["detail"]] == [["query", "reason"]]
    settled(console)
    assert entries_for(console, plate) == []


@pytest.mark.parametrize(("mistake", "field"), [
    ({"start": "2026-03-02T09:00:00+08:00", "end": "2026-03-02T08:00:00+08:00"}, "end"),
    ({"cursor": "%%%"}, "cursor"),
    ({"limit": "0"}, "limit"),
])
def test_a_search_refused_for_a_mistake_reads_nothing_and_is_not_audited(console: ConsoleProcess,
                                                                         mistake: dict[str, str], field: str) -> None:
    plate = unique_plate()
    response = console.client("viewer").get("/api/v1/captures",
                                            params={"plate": plate, "reason": marker("mistake"), **mistake})
    assert response.status_code == 422 and [e["loc"] for e in response.json()["detail"]] == [["query", field]]
    settled(console)
    assert entries_for(console, plate) == []


def test_a_reason_is_kept_verbatim_as_text_markup_and_all(console: ConsoleProcess) -> None:
    reason = f"<script>alert(1)</script> {marker('case')}"
    response = console.client("viewer").get("/api/v1/captures", params={"plate": "浙AWL999",
                                                                       "reason": f"  {reason}\t"})
    assert response.status_code == 200, response.text
    settled(console)
    entry = the_entry(console, reason)  # stripped, nothing escaped or removed
    assert entry["action"] == "captures.search" and entry["target"] == "浙AWL999"


# -- the audit topic down -------------------------------------------------------------------------------------

@pytest.fixture
def lone_console(console: ConsoleProcess, tmp_path: Path) -> Iterator[tuple[ConsoleProcess, BrokerProcess]]:
    """A console on a broker of its own (the shared HBase gateway, so the same users), and that broker."""
    build_city(MAP_SEED, MAP_CHECKPOINTS).save(tmp_path / "deployment_map.json")
    broker = BrokerProcess(tmp_path / "broker").start()
    proc = None
    try:
        proc = start_console(Backing(broker, console.backing.gateway, tmp_path))
        yield proc, broker
    finally:
        if proc is not None:
            proc.stop()
        broker.stop()


def test_with_the_audit_topic_down_a_plate_search_is_503_audit_and_serves_nothing(
        lone_console: tuple[ConsoleProcess, BrokerProcess]) -> None:
    proc, broker = lone_console
    viewer = proc.client("viewer")  # logged in (an audited event) while the bus is up
    params = {"plate": "浙AWL999", "reason": marker("down")}
    assert viewer.get("/api/v1/captures", params=params).status_code == 200
    broker.stop()
    response = viewer.get("/api/v1/captures", params=params)
    assert response.status_code == 503, response.text
    body = response.json()
    assert body["backend"] == "audit" and "items" not in body


# -- video (its own site: broker, gateway and object store) ---------------------------------------------------

LATE = dt.datetime(2024, 5, 1, 23, 30, tzinfo=CITY_TZ)


@pytest.fixture(scope="module")
def clip(video_site: VideoSite) -> storage.StoredVideo:
    return video_site.record("cam-a", LATE, seed=1)


@pytest.mark.slow
def test_a_view_is_audited_when_play_starts_not_at_each_seek(video_site: VideoSite, clip: storage.StoredVideo) -> None:
    console, viewer = video_site.console, video_site.console.client("viewer")
    reasons = {name: marker(f"view-{name}") for name in ("whole", "from-0", "seek", "playable")}
    media = "/api/v1/video/media"
    assert viewer.get(media, params={"url": clip.url, "reason": reasons["whole"]}).status_code == 200
    assert viewer.get(media, params={"url": clip.url, "reason": reasons["from-0"]},
                      headers={"Range": "bytes=0-"}).status_code == 206
    assert viewer.get(media, params={"url": clip.url, "reason": reasons["seek"]},
                      headers={"Range": "bytes=100-199"}).status_code == 206
    assert viewer.get("/api/v1/video/playable", params={"url": clip.url}).status_code == 200
    settled(console)
    whole, from_0 = the_entry(console, reasons["whole"]), the_entry(console, reasons["from-0"])
    assert (whole["action"], whole["target"], whole["query"]) == ("video.view", clip.url, {})
    assert (from_0["action"], from_0["target"], from_0["query"]) == ("video.view", clip.url, {"range": "bytes=0-"})
    assert entries_for(console, reasons["seek"]) == []
    assert len(entries_for(console, clip.url, action="video.view")) == 2  # /playable fetched no footage


@pytest.mark.slow
def test_an_export_needs_a_reason_and_is_an_attachment_named_after_the_object(
        video_site: VideoSite, clip: storage.StoredVideo) -> None:
    console, viewer = video_site.console, video_site.console.client("viewer")
    refused = viewer.get("/api/v1/video/media", params={"url": clip.url, "download": "true"})
    assert refused.status_code == 422 and [e["loc"] for e in refused.json()["detail"]] == [["query", "reason"]]
    reason = marker("export")
    answer = viewer.get("/api/v1/video/media", params={"url": clip.url, "download": "true", "reason": reason})
    assert answer.status_code == 200
    assert answer.content == video_site.s3().get_object(*storage.parse_s3_url(clip.url)).read()
    name = clip.url.rsplit("/", 1)[-1]
    assert answer.headers["content-disposition"] == f'attachment; filename="{name}"'
    settled(console)
    exports = entries_for(console, clip.url, action="video.export")
    assert len(exports) == 1 and exports[0]["reason"] == reason  # the refused one left nothing
    entry = the_entry(console, reason)
    assert (entry["target"], entry["query"]) == (clip.url, {"download": True})


@pytest.mark.slow
def test_a_tasks_objects_are_an_audited_read(video_site: VideoSite, clip: storage.StoredVideo) -> None:
    first = clip.start_time + dt.timedelta(seconds=0.5)
    found = {"task_id": "t-audit", "video_url": clip.url, "camera_id": clip.camera_id, "object_id": 1,
             "class": "person", "color": "red", "first_seen": first.isoformat(timespec="milliseconds"),
             "last_seen": (first + dt.timedelta(seconds=1.5)).isoformat(timespec="milliseconds"),
             "track": [[0.0, 10, 20, 30, 40], [1.5, 50, 20, 30, 40]],
             "thumbnail_url": "s3://synopsis/t-audit/thumbs/000001.jpg",
             "synopsis_url": "s3://synopsis/t-audit/synopsis.webm", "synopsis_time": 0.4}
    load_task(video_site, "t-audit", clip, "done", [found], objects=1, progress=1.0)
    reason = marker("objects")
    answer = video_site.console.client("viewer").get("/api/v1/video/tasks/t-audit/objects", params={"reason": reason})
    assert answer.status_code == 200 and [o["object_id"] for o in answer.json()] == [1]
    settled(video_site.console)
    entry = the_entry(video_site.console, reason)
    assert (entry["action"], entry["target"], entry["query"]) == ("video.objects", "t-audit", {})
