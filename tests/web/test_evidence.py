"""Evidence locks against a real console, broker, HBase gateway and object store (SeaweedFS).

An operator locks a capture, a hit or a video with a reason (one ``evidence.lock`` audit event each); the lock keeps
a copy of the item (and a video's object in the ``evidence`` bucket, which has no lifecycle rule), so a locked
capture is still readable through ``/api/v1/evidence`` after its own table's TTL has made it invisible everywhere
else; only an admin unlocks, which removes the copy.
"""

from __future__ import annotations

import datetime as dt
import time
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import happybase
import pytest
from minio.error import S3Error

from contracts.config import Config
from contracts.records import CITY_TZ, Kind
from contracts.retention import Retention
from contracts.surveillance import hit_record, watch_hit_id
from contracts.tables import captures, surveillance
from spark_jobs.capture_writer import close_cached_clients, write_puts
from testkit.web_data import StepClock, puts_for, valid_records, writer
from tests.web._video_support import VideoSite, video_site
from video import storage

__all__ = ["video_site"]  # the fixture, imported for pytest

TTL_S = 4
RETENTION = Retention.from_config(Config({"retention": {"captures_days": TTL_S / 86_400}}, None))
"""A test config's ``[retention]``: captures kept ``TTL_S`` seconds (hits and audit as by default)."""
EVIDENCE = "/api/v1/evidence"


def marker(what: str) -> str:
    return f"{what}-{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="module")
def site(video_site: VideoSite) -> Iterator[VideoSite]:
    """The site's capture tables made with the short TTL, hit tables with the default one (as their jobs do)."""
    conn = happybase.Connection("127.0.0.1", video_site.hbase_port)
    try:
        captures.ensure_capture_tables(conn, RETENTION.captures_ttl_s)
        surveillance.ensure_surveillance_tables(conn, RETENTION.hits_ttl_s)
        assert conn.table(Kind.VEHICLE.value).families()[b"r"]["time_to_live"] == TTL_S
    finally:
        conn.close()
    yield video_site


_clock = StepClock(dt.datetime(2026, 3, 2, 8, 0, tzinfo=CITY_TZ))


def fresh_vehicle(site: VideoSite) -> dict[str, Any]:
    """A vehicle capture written now (its TTL starts now), as the ingest writer writes it."""
    pairs = [(kind, {**record, "record_id": marker("ev")}) for kind, record in valid_records(5, clock=_clock)
             if kind is Kind.VEHICLE][:1]
    assert pairs
    write_puts(puts_for(pairs), writer(site.hbase_port))
    close_cached_clients()
    return pairs[0][1]


def a_hit(site: VideoSite) -> dict[str, Any]:
    record_id = marker("hit-record")
    hit = hit_record(hit_id=watch_hit_id("w-evidence", record_id), watch_id="w-evidence", kind="plate",
                     record_id=record_id, checkpoint_id="330102#1#0#0", capture_time="2026-03-02T08:00:00.000+08:00",
                     score=1.0, location={"lat": 30.0, "lon": 120.0}, detected_at="2026-03-02T08:00:01.000+08:00",
                     match="exact", plate="浙AWL999")
    conn = happybase.Connection("127.0.0.1", site.hbase_port)
    try:
        for table, key, cells in surveillance.hit_rows(hit):
            conn.table(table).put(key, cells)
    finally:
        conn.close()
    return hit


def a_clip(site: VideoSite, seed: int) -> storage.StoredVideo:
    return site.record(f"cam-ev{seed}", dt.datetime(2024, 5, 2, 9, 0, seed, tzinfo=CITY_TZ), seconds=1, seed=seed)


def lock(site: VideoSite, kind: str, ident: str, reason: str, user: str = "operator") -> Any:
    return site.console.client(user).post(EVIDENCE, json={"kind": kind, "id": ident, "reason": reason})


def one_entry(site: VideoSite, action: str, text: str) -> dict[str, Any]:
    entries = site.console.audit(until=lambda found: len(found) >= 1, action=action, q=text)
    time.sleep(0.5)  # a second event would be right behind the first
    entries = site.console.audit(until=lambda found: len(found) >= 1, action=action, q=text)
    assert len(entries) == 1, entries
    return entries[0]


def evidence_object(site: VideoSite, key: str) -> bytes | None:
    try:
        return site.s3().get_object("evidence", key).read()
    except S3Error as exc:
        assert exc.code == "NoSuchKey", exc
        return None


# -- locking -----------------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_a_locked_capture_outlives_the_ttl_of_its_table(site: VideoSite) -> None:
    operator = site.console.client("operator")
    vehicle = fresh_vehicle(site)
    rid, reason = vehicle["record_id"], marker("case")
    created = lock(site, "capture", rid, reason)
    written = time.monotonic()
    assert created.status_code == 201, created.text
    body = created.json()
    assert body["kind"] == "capture" and body["id"] == rid and body["reason"] == reason
    assert body["locked_by"] == "operator" and "record" not in body
    assert dt.datetime.fromisoformat(body["locked_at"]).utcoffset() is not None
    entry = one_entry(site, "evidence.lock", reason)
    assert (entry["user"], entry["reason"], entry["target"], entry["outcome"]) == ("operator", reason, rid, "ok")

    time.sleep(max(0.0, TTL_S + 1.5 - (time.monotonic() - written)))
    gone = operator.get(f"/api/v1/captures/vehicle/{rid}")
    assert gone.status_code == 404, gone.text  # retention did its work on the capture table
    kept = operator.get(f"{EVIDENCE}/capture/{rid}")
    assert kept.status_code == 200, kept.text
    record = kept.json()["record"]
    assert (record["record_id"], record["plate_number"], record["kind"]) == (rid, vehicle["plate_number"], "vehicle")
    assert record["capture_time"] == vehicle["capture_time"] and kept.json()["reason"] == reason
    read = one_entry(site, "evidence.read", rid)
    assert (read["user"], read["query"]) == ("operator", {"kind": "capture"})
    assert lock(site, "capture", rid, marker("late")).status_code == 409  # still locked
    assert site.console.client("admin").delete(f"{EVIDENCE}/capture/{rid}").status_code == 200
    assert lock(site, "capture", rid, marker("late")).status_code == 404


@pytest.mark.slow
def test_a_hit_is_locked_with_its_record(site: VideoSite) -> None:
    hit, reason = a_hit(site), marker("hit-case")
    created = lock(site, "hit", hit["hit_id"], reason, user="admin")
    assert created.status_code == 201, created.text
    entry = one_entry(site, "evidence.lock", reason)
    assert (entry["user"], entry["target"], entry["query"]) == ("admin", hit["hit_id"],
                                                                {"kind": "hit", "id": hit["hit_id"]})
    kept = site.console.client("operator").get(f"{EVIDENCE}/hit/{hit['hit_id']}")
    assert kept.status_code == 200 and kept.json()["record"] == hit
    assert lock(site, "hit", hit["hit_id"], marker("again")).status_code == 409


@pytest.mark.slow
def test_a_video_is_copied_into_the_evidence_bucket_and_served_from_it(site: VideoSite) -> None:
    clip, reason = a_clip(site, 1), marker("video-case")
    original = site.s3().get_object("videos", clip.key).read()
    created = lock(site, "video", clip.url, reason)  # the URL the video pages show, or the key
    assert created.status_code == 201, created.text
    assert created.json()["id"] == clip.key
    entry = one_entry(site, "evidence.lock", reason)
    assert (entry["user"], entry["target"], entry["reason"]) == ("operator", clip.url, reason)
    assert evidence_object(site, clip.key) == original
    assert site.s3().get_bucket_lifecycle("evidence") is None  # nothing expires there

    operator = site.console.client("operator")
    kept = operator.get(f"{EVIDENCE}/video/{quote(clip.key)}")
    assert kept.status_code == 200, kept.text
    record = kept.json()["record"]
    assert (record["url"], record["camera_id"], record["size"]) == (clip.url, clip.camera_id, len(original))
    assert record["evidence_url"] == f"s3://evidence/{clip.key}"

    # served from the evidence bucket even once the footage itself is gone (as its lifecycle rule would do)
    retention = storage.connect(site.store.url, *_key(site, "retention"))
    retention.remove_object("videos", clip.key)  # (the admin key may not delete: the retention identity does)
    view = marker("view")
    media = operator.get(f"{EVIDENCE}/video/{quote(clip.key)}/media", params={"reason": view})
    assert media.status_code == 200, media.text
    assert media.content == original
    assert media.headers["content-type"].startswith("video/")
    assert media.headers["x-content-type-options"] == "nosniff"
    assert "sandbox" in media.headers["content-security-policy"]
    ranged = operator.get(f"{EVIDENCE}/video/{quote(clip.key)}/media", headers={"Range": "bytes=10-19"})
    assert ranged.status_code == 206 and ranged.content == original[10:20]
    viewed = one_entry(site, "video.view", view)
    assert (viewed["user"], viewed["target"]) == ("operator", f"s3://evidence/{clip.key}")
    assert operator.get("/api/v1/video/media", params={"url": clip.url}).status_code == 404


def _key(site: VideoSite, identity: str) -> tuple[str, str]:
    key = site.store.credentials(identity)
    return key.access_key, key.secret_key


# -- unlocking ---------------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_only_an_admin_unlocks_and_the_evidence_copy_goes_with_the_lock(site: VideoSite) -> None:
    clip, reason = a_clip(site, 2), marker("unlock-case")
    assert lock(site, "video", clip.key, reason).status_code == 201
    path = f"{EVIDENCE}/video/{quote(clip.key)}"
    refused = site.console.client("operator").delete(path)
    assert refused.status_code == 403
    assert evidence_object(site, clip.key) is not None
    unlocked = site.console.client("admin").delete(path)
    assert unlocked.status_code == 200, unlocked.text
    assert unlocked.json()["reason"] == reason and unlocked.json()["id"] == clip.key
    entry = one_entry(site, "evidence.unlock", clip.url)
    assert (entry["user"], entry["outcome"]) == ("admin", "ok")
    assert site.console.client("operator").get(path).status_code == 404
    assert site.console.client("operator").get(f"{path}/media").status_code == 404
    assert evidence_object(site, clip.key) is None
    assert site.console.client("admin").delete(path).status_code == 404
    assert site.s3().get_object("videos", clip.key).read()  # the footage itself is left to its retention


# -- the list ----------------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_the_locks_are_listed_newest_first_in_pages(site: VideoSite) -> None:
    hits = [a_hit(site) for _ in range(3)]
    for hit in hits:
        assert lock(site, "hit", hit["hit_id"], marker("list")).status_code == 201
    operator = site.console.client("operator")
    first = operator.get(EVIDENCE, params={"limit": 2})
    assert first.status_code == 200, first.text
    page = first.json()
    assert [i["id"] for i in page["items"]] == [hits[2]["hit_id"], hits[1]["hit_id"]]
    assert all("record" not in item for item in page["items"]) and page["next"]
    following = operator.get(EVIDENCE, params={"limit": 2, "cursor": page["next"]}).json()
    assert following["items"][0]["id"] == hits[0]["hit_id"]
    everything = operator.get(EVIDENCE, params={"limit": 500}).json()["items"]
    times = [item["locked_at"] for item in everything]
    assert times == sorted(times, reverse=True)
    assert operator.get(EVIDENCE, params={"cursor": "!!"}).status_code == 422
    assert one_entry(site, "evidence.list", page["next"])["query"] == {"limit": 2, "cursor": page["next"]}


# -- refusals ----------------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_bad_requests_are_refused_with_4xx(site: VideoSite) -> None:
    operator = site.console.client("operator")
    hit = a_hit(site)
    missing = operator.post(EVIDENCE, json={"kind": "hit", "id": hit["hit_id"]})
    assert missing.status_code == 422
    assert [e["loc"] for e in missing.json()["detail"]] == [["body", "reason"]]
    assert "reason" in missing.json()["detail"][0]["msg"]
    blank = operator.post(EVIDENCE, json={"kind": "hit", "id": hit["hit_id"], "reason": "   "})
    assert blank.status_code == 422
    unknown_kind = operator.post(EVIDENCE, json={"kind": "plate", "id": "x", "reason": "case 1"})
    assert unknown_kind.status_code == 422 and unknown_kind.json()["detail"][0]["loc"] == ["body", "kind"]
    for kind, bad in (("capture", "a/b"), ("capture", "x" * 300), ("hit", "a|b"), ("video", "../etc/passwd"),
                      ("video", "s3://captures/x.jpg"), ("video", "cam/\u0000x")):
        answer = operator.post(EVIDENCE, json={"kind": kind, "id": bad, "reason": "case 2"})
        assert answer.status_code == 422, (kind, bad, answer.text)
    for kind, ident in (("capture", "no-such-record"), ("hit", "0" * 24), ("video", "cam-none/2024/01/01/000000_x")):
        answer = lock(site, kind, ident, marker("unknown"))
        assert answer.status_code == 404, (kind, answer.text)
        assert operator.get(f"{EVIDENCE}/{kind}/{ident}").status_code == 404
    assert operator.get(f"{EVIDENCE}/plate/x").status_code == 422
    assert operator.get(f"{EVIDENCE}/capture/a%7Cb%20c").status_code == 422
    markup = "<script>alert(1)</script> & case 3"
    created = lock(site, "hit", hit["hit_id"], markup)
    assert created.status_code == 201 and created.json()["reason"] == markup
    assert operator.get(f"{EVIDENCE}/hit/{hit['hit_id']}").json()["reason"] == markup
    assert lock(site, "hit", hit["hit_id"], "again").status_code == 409
    entries = site.console.audit(until=lambda found: len(found) >= 2, action="evidence.lock", q=hit["hit_id"])
    assert sorted(e["outcome"].split(":")[0] for e in entries) == ["ok", "refused"]


@pytest.mark.slow
def test_a_viewer_gets_403_on_every_evidence_route(site: VideoSite) -> None:
    viewer = site.console.client("viewer")
    hit = a_hit(site)
    assert lock(site, "hit", hit["hit_id"], marker("viewer")).status_code == 201
    answers = [viewer.post(EVIDENCE, json={"kind": "hit", "id": hit["hit_id"], "reason": "r"}),
               viewer.get(EVIDENCE), viewer.get(f"{EVIDENCE}/hit/{hit['hit_id']}"),
               viewer.get(f"{EVIDENCE}/video/cam/x.webm/media"), viewer.delete(f"{EVIDENCE}/hit/{hit['hit_id']}")]
    assert [a.status_code for a in answers] == [403] * 5
    assert site.console.client(None).get(EVIDENCE).status_code == 401
