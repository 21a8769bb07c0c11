"""The watch stage end to end: the service as a process, commands and captures on a real broker.

Ground truth is built into the captures (which plate, which face identity, where), so the hits the
service publishes are compared one by one with the expected set; precision and recall are printed.
"""

from __future__ import annotations

import random

from contracts.ports import free_port
from contracts.records import epoch_ms
from contracts.surveillance import watch_hit_id
from contracts.topics import Topics
from ingest import values
from testkit.surveillance import CHECKPOINTS, DISTRICTS, capture_time, city_map, face, vehicle
from tests.surveillance._support import Site, face_watch, plate_watch, scrape

T = Topics()


def precision_recall(name: str, found: set, expected: set) -> None:
    true = len(found & expected)
    precision = true / len(found) if found else 1.0
    recall = true / len(expected) if expected else 1.0
    print(f"{name}: {len(found)} hits, {len(expected)} expected, precision {precision:.3f}, recall {recall:.3f}")
    assert found == expected, f"unexpected {sorted(found - expected)[:5]}, missed {sorted(expected - found)[:5]}"


def test_exact_fuzzy_face_scope_expiry_removal_against_ground_truth(site: Site) -> None:
    rng = random.Random(12)
    suspect, stranger = values.unit_vector(rng), values.unit_vector(rng)
    cmd = site.publisher.command
    site.service().start()
    cmd(T.control_watchlist, "p-exact", plate_watch("p-exact", "浙A12345"))
    cmd(T.control_watchlist, "p-scoped", plate_watch("p-scoped", "浙B88888", districts=[DISTRICTS[0]]))
    cmd(T.control_watchlist, "p-cp", plate_watch("p-cp", "浙C77777", checkpoints=[CHECKPOINTS[5]]))
    cmd(T.control_watchlist, "p-expired", plate_watch("p-expired", "浙D66666", expires_at=capture_time(-60)))
    cmd(T.control_watchlist, "p-removed", plate_watch("p-removed", "浙E55555"))
    cmd(T.control_watchlist, "p-removed", None)
    cmd(T.control_watchlist, "f-suspect", face_watch("f-suspect", suspect, threshold=0.8))
    replies = site.reader(T.surveillance_replies, 1)
    replies.read(lambda got: len(got) >= 7)

    expected: set[tuple[str, str, str]] = set()
    vehicles, faces = [], []
    for n in range(300):  # passers-by: random plates and faces hit nothing
        vehicles.append(vehicle(f"v{n}", CHECKPOINTS[n % 8], values.plate(rng, "blue"), rng))
        faces.append(face(f"f{n}", CHECKPOINTS[n % 8], rng))
    cases = [("浙A12345", CHECKPOINTS[0], "p-exact", "exact"), ("浙A1234S", CHECKPOINTS[1], "p-exact", "fuzzy"),
             ("浙AI2345", CHECKPOINTS[6], "p-exact", "fuzzy"), ("浙A1Z34S", CHECKPOINTS[2], None, None),  # two misreads
             ("浙A12346", CHECKPOINTS[2], None, None),  # one different glyph, not a confusable one
             ("浙B88888", CHECKPOINTS[1], "p-scoped", "exact"), ("浙B88888", CHECKPOINTS[4], None, None),
             ("浙C77777", CHECKPOINTS[5], "p-cp", "exact"), ("浙C77777", CHECKPOINTS[4], None, None),
             ("浙D66666", CHECKPOINTS[0], None, None), ("浙E55555", CHECKPOINTS[0], None, None)]
    for n, (plate, checkpoint, watch_id, match) in enumerate(cases):
        vehicles.append(vehicle(f"case{n}", checkpoint, plate, rng))
        if watch_id:
            expected.add((watch_id, f"case{n}", match))
    for n in range(20):  # the suspect seen again (similarity ~0.98), a look-alike far below the threshold
        faces.append(face(f"suspect{n}", CHECKPOINTS[n % 8], rng, suspect))
        expected.add(("f-suspect", f"suspect{n}", "face"))
        faces.append(face(f"other{n}", CHECKPOINTS[n % 8], rng, stranger))
    site.publisher.captures(T.vehicle, vehicles)
    site.publisher.captures(T.face, faces)

    hits = [h for h in site.reader(T.surveillance_hits).read(lambda got: len(got) >= len(expected), quiet_s=2.0)
            if h["kind"] != "cloned_plate"]  # the cloned-plate stage judges every plate, watched ones included
    plate_hits = {(h["watch_id"], h["record_id"], h["match"]) for h in hits if h["kind"] == "plate"}
    face_hits = {(h["watch_id"], h["record_id"], "face") for h in hits if h["kind"] == "face"}
    precision_recall("plates", plate_hits, {e for e in expected if e[2] != "face"})
    precision_recall("faces", face_hits, {e for e in expected if e[2] == "face"})
    assert all(h["hit_id"] == watch_hit_id(h["watch_id"], h["record_id"]) for h in hits)

    where = {c.checkpoint_id: c for c in city_map().checkpoints}
    exact = next(h for h in hits if h["record_id"] == "case0")
    assert exact["location"] == {"district": DISTRICTS[0], "crossroad": 0, "lat": where[CHECKPOINTS[0]].lat,
                                 "lon": where[CHECKPOINTS[0]].lon}
    assert exact["plate"] == "浙A12345" and exact["score"] == 1.0
    latest = max((h for h in hits if h["watch_id"] == "p-exact"), key=lambda h: len(h["trajectory"]))
    trajectory = latest["trajectory"]  # the cases sit on checkpoints of different partitions: any arrival order
    assert sorted(p["record_id"] for p in trajectory) == ["case0", "case1", "case2"]
    times = [epoch_ms(p["capture_time"]) for p in trajectory]
    assert times == sorted(times)  # drawn in capture-time order
    assert min(h["score"] for h in hits if h["kind"] == "face") > 0.9

    alerts = [a for a in site.reader(T.alerts, 1).read(lambda got: len(got) >= len(hits))
              if a["labels"]["alertname"] == "WatchlistHit"]
    assert {a["labels"]["watch_id"] for a in alerts} == {"p-exact", "p-scoped", "p-cp", "f-suspect"}
    assert all(a["status"] == "firing" for a in alerts)
    status = {(r["id"], r["status"]) for r in replies.values()}
    assert {("p-exact", "accepted"), ("p-removed", "removed"), ("f-suspect", "accepted")} <= status
    assert ("p-expired", "accepted") in status  # applied, never matches: the reply says it has expired


def test_malformed_commands_are_rejected_with_a_reply_and_the_service_keeps_going(site: Site) -> None:
    rng = random.Random(3)
    port = free_port()
    service = site.service(metrics_port=port).start()
    cmd = site.publisher.command
    bad = {"k-kind": {"watch_id": "k-kind", "kind": "car", "plate": "浙A12345"},
           "k-plate": {"watch_id": "k-plate", "kind": "plate"},
           "k-b64": {"watch_id": "k-b64", "kind": "face", "feature": "not base64!"},
           "k-len": {"watch_id": "k-len", "kind": "face", "feature": "AAAA"},
           "k-thr": face_watch("k-thr", values.unit_vector(rng), threshold=1.5),
           "k-exp": plate_watch("k-exp", "浙A12345", expires_at="tomorrow")}
    for key, value in bad.items():
        cmd(T.control_watchlist, key, value)
    cmd(T.control_watchlist, "k-json", b"{not json")
    cmd(T.control_watchlist, "k-good", plate_watch("k-good", "浙A12345"))
    replies = site.reader(T.surveillance_replies, 1).read(lambda got: len(got) >= 8)
    by_id = {r["id"]: r for r in replies}
    reasons = {key: by_id[key]["reason"] for key in (*bad, "k-json")}
    print(reasons)
    assert all(by_id[key]["status"] == "rejected" for key in reasons)
    assert reasons["k-kind"].startswith("kind:") and reasons["k-plate"] == "plate: missing"
    assert reasons["k-b64"] == "feature: bad base64" and "wrong embedding length" in reasons["k-len"]
    assert reasons["k-thr"].startswith("threshold:") and reasons["k-exp"].startswith("expires_at:")
    assert reasons["k-json"].startswith("value: not JSON")
    assert by_id["k-good"]["status"] == "accepted"
    # a malformed capture is skipped; the next one still hits
    site.publisher.captures(T.vehicle, [{"record_id": "junk", "checkpoint_id": CHECKPOINTS[0]}])
    site.publisher.command(T.vehicle, CHECKPOINTS[0], b"\xff not json")
    unreadable = vehicle("blurred", CHECKPOINTS[0], "浙A12345", rng)
    site.publisher.captures(T.vehicle, [{**unreadable, "plate_number": "UNRECOGNIZED"},
                                        vehicle("after", CHECKPOINTS[0], "浙A12345", rng)])
    hits = site.reader(T.surveillance_hits).read(lambda got: len(got) >= 1)
    assert [h["record_id"] for h in hits if h["kind"] == "plate"] == ["after"]
    assert service.process is not None and service.process.poll() is None
    counted = scrape(f"http://127.0.0.1:{port}/metrics")
    assert counted[("surveillance_commands_total", "rejected", "watch")] == 7
    assert counted[("surveillance_commands_total", "accepted", "watch")] == 1
    assert counted[("surveillance_records_skipped_total", "malformed", "watch")] == 2
    assert counted[("surveillance_records_skipped_total", "unrecognized", "watch")] == 1
    assert counted[("surveillance_hits_total", "exact", "plate")] == 1


def test_watches_survive_a_restart_and_a_watch_added_while_down_applies(site: Site) -> None:
    rng = random.Random(4)
    service = site.service().start()
    site.publisher.command(T.control_watchlist, "w1", plate_watch("w1", "浙A11111"))
    site.reader(T.surveillance_replies, 1).read(lambda got: len(got) >= 1)
    site.publisher.captures(T.vehicle, [vehicle("a0", CHECKPOINTS[1], "浙A11111", rng, capture_time(-30))])
    hits = site.reader(T.surveillance_hits)
    hits.read(lambda got: len(got) >= 1)
    assert service.stop() == 0
    site.publisher.command(T.control_watchlist, "w2", plate_watch("w2", "浙A22222"))
    site.publisher.captures(T.vehicle, [vehicle("a", CHECKPOINTS[0], "浙A11111", rng),
                                        vehicle("b", CHECKPOINTS[3], "浙A22222", rng)])
    service.start()
    got = [h for h in hits.read(lambda got: len(got) >= 3, quiet_s=1.0) if h["kind"] == "plate"]
    assert sorted((h["watch_id"], h["record_id"]) for h in got) == [("w1", "a"), ("w1", "a0"), ("w2", "b")]
    after = next(h for h in got if h["record_id"] == "a")  # the trajectory was read back from the hits topic
    assert [p["record_id"] for p in after["trajectory"]] == ["a0", "a"]
