"""Malformed and foreign records on every topic the service reads: each is set aside, counted and logged,
and the good records sent after them still do their work (one record never stops a job).

One process runs every stage, so one start covers every consumer: the captures (watch, sightings and
statistics stage A), the compacted command topics (read whole at start: a record there that crashed a
stage would crash every restart), ``surveillance.hits`` (trajectories) and the internal
``surveillance.plate-sightings`` (cloned plates) and ``surveillance.stat-events`` (statistics stage B).
Each gets :data:`UNREADABLE`, a valid-looking record without one of its fields and (data topics) a null
value; the stages that keep event time also get a capture from the far future, and stage B a progress mark
of a capture partition that does not exist. Two records have fields so large that what they cause would
not fit in a record: a command keyed by 600 KB (its rejection echoes the key) and a watched plate's capture
whose record id is half a megabyte (its hit holds the id twice).
"""

from __future__ import annotations

import random
import time
from typing import Any

from contracts.ports import free_port
from contracts.records import encode
from contracts.surveillance import hit_record, stat_from_json, watch_hit_id
from ingest import values
from surveillance.stats_events import version
from surveillance.streams import REPLY_ID_CHARS
from testkit.surveillance import CHECKPOINTS, capture_time, face, vehicle
from tests.surveillance._support import UNREADABLE, Site, plate_watch, scrape, without
from tests.surveillance._support_stats import T, finals, stat, tally

FAR_FUTURE = "9999-12-31T23:59:00.000+00:00"
"""A capture time a stage must survive: an alert held 10 minutes past it would be in year 10000."""


def is_hit(value: Any) -> bool:
    return isinstance(value, dict) and "hit_id" in value


def test_every_topic_the_service_reads_sets_bad_records_aside_and_good_ones_after_them_still_work(
        site: Site) -> None:
    rng = random.Random(51)
    send = site.publisher.command
    bad_watches = {f"bad-w{n}": value for n, value in enumerate(UNREADABLE)}
    bad_watches["bad-w-plate"] = without(plate_watch("bad-w-plate", "浙A0W001"), "plate")
    bad_watches["K" * 600_000] = encode(plate_watch("k-short", "浙A0W001"))
    bad_stats = {f"bad-s{n}": value for n, value in enumerate(UNREADABLE)}
    bad_stats["bad-s-measure"] = without(stat("bad-s-measure", "vehicle_count", "city", 2), "measure")
    bad_stats["bad-s-time"] = encode(stat("bad-s-time", "vehicle_count", "city", 2, requested_at="yesterday"))
    for topic, commands in ((T.control_watchlist, bad_watches), (T.control_stats, bad_stats)):
        for key, value in commands.items():
            send(topic, key, value)
    service = site.service(metrics_port=free_port(), allowed_lateness_s=2, partial_interval_s=0.5).start()

    # commands after the bad ones take effect
    live = stat("s-live", "vehicle_count", "city", 2)
    send(T.control_watchlist, "w-after", plate_watch("w-after", "浙A0W001"))
    send(T.control_watchlist, "w-big", plate_watch("w-big", "浙A0W002"))
    send(T.control_stats, "s-live", live)
    good = {"w-after": "accepted", "w-big": "accepted", "s-live": "accepted"}
    rejected = {key[:REPLY_ID_CHARS] for key in [*bad_watches, *bad_stats]}
    replies = site.reader(T.surveillance_replies, 1).read(lambda got: {r["id"] for r in got} >= {*rejected, *good})
    status = {r["id"]: (r["status"], r["reason"]) for r in replies}
    assert {k: s for k, (s, _r) in status.items()} == {**dict.fromkeys(rejected, "rejected"), **good}
    # UNREADABLE[1] nests too deep, UNREADABLE[2] has too many digits
    assert "RecursionError" in status["bad-w1"][1] and status["bad-w-plate"][1] == "plate: missing"
    assert status["bad-s-time"][1].startswith("requested_at:") and "ValueError" in status["bad-s2"][1]

    # garbage on every data topic the service reads
    now_ms = round(time.time() * 1000)
    hit = hit_record(hit_id=watch_hit_id("w-after", "bad-h"), watch_id="w-after", kind="plate", record_id="bad-h",
                     checkpoint_id=CHECKPOINTS[0], capture_time=capture_time(), score=1.0, location={},
                     detected_at=capture_time())
    event = {"stat_id": "s-live", "version": version(stat_from_json(live)), "group": "city", "capture_ms": now_ms,
             "plate": None, "speed_kmh": None, "source": [T.vehicle, 0, 10**6, 0]}
    lacking = {T.vehicle: without(vehicle("bad-v", CHECKPOINTS[0], "浙A0W001", rng), "plate_number"),
               T.face: without(face("bad-f", CHECKPOINTS[0], rng), "feature"),
               T.surveillance_hits: without(hit, "capture_time"),
               T.plate_sightings: without({"plate": "浙A0W001", "record_id": "bad-s", "checkpoint_id": CHECKPOINTS[0],
                                           "capture_time": capture_time()}, "record_id"),
               T.stat_events: without(event, "source")}
    for topic, missing_field in lacking.items():
        for raw in (*UNREADABLE, missing_field, None):
            send(topic, "s-live|city", raw)   # on stat-events, the partition the statistic's events take
    send(T.stat_events, "s-live|city", encode({**event, "capture_ms": now_ms + 86_400_000}))
    send(T.stat_events, "s-live|city", encode({"progress": [T.vehicle, 99], "capture_ms": 0}))
    # a hit with its location in a form no map has: still a hit (no coordinates), and no crash
    send(T.surveillance_hits, "w-after", encode({**hit, "location": [30.2, 120.1]}))

    # a watched plate's capture whose record id is half a megabyte: its hit is set aside, its alert goes out
    big = {**vehicle("B" * 520_000, CHECKPOINTS[2], "浙A0W002", rng), "image_url": "s3://captures/big.jpg"}
    # good captures after all of it: watch hits, a cloned plate, a statistic
    now = [vehicle("after", CHECKPOINTS[2], "浙A0W001", rng),
           *(vehicle(f"count{n}", CHECKPOINTS[n], values.plate(rng, "blue"), rng) for n in range(6))]
    odd = [vehicle("far-future", CHECKPOINTS[3], "浙A0W001", rng, FAR_FUTURE),
           vehicle("clone-a", CHECKPOINTS[0], "浙A0C101", rng, capture_time(-120)),
           vehicle("clone-b", CHECKPOINTS[4], "浙A0C101", rng, capture_time(-60))]
    site.publisher.captures(T.vehicle, [big, *now, *odd])

    wanted = {("plate", "w-after", "after"), ("plate", "w-after", "far-future"), ("cloned_plate", None, "clone-b")}
    hits = site.reader(T.surveillance_hits).read(
        lambda got: wanted <= {(h["kind"], h["watch_id"], h["record_id"]) for h in got if is_hit(h)})
    assert {h["record_id"] for h in hits if is_hit(h)} == {"bad-h", *(h[2] for h in wanted)}
    expected = tally(live, [big, *now])   # the far future is not counted
    got = finals(site.reader(T.surveillance_stats).read(lambda r: finals(r).keys() >= expected.keys(), timeout=60))
    # The minutes-old pair is late only if stream time (the slowest capture partition's) has passed its windows by
    # then; on a loaded machine it may lag a minute, and clone-b was then counted in its own, still open, window
    # (CI at d1066eb). Either is right; what must hold is that nothing else is counted.
    pair = tally(live, odd[1:])
    got = {key: values for key, values in got.items() if key not in pair or values != [pair[key]] or key in expected}
    assert got == {key: [value] for key, value in expected.items()}

    assert service.process is not None and service.process.poll() is None
    metrics = scrape(service.metrics_url())

    def skipped(stage: str, reason: str) -> float:
        return metrics.get(("surveillance_records_skipped_total", *sorted((stage, reason))), 0.0)

    each = len(UNREADABLE) + 2   # and the record without a field, and the null
    expected_skips = {("watch", "malformed"): 2 * each, ("watch", "malformed hit"): each,
                      ("watch", "output too large"): 1, ("sightings", "malformed"): each,
                      ("cloned", "malformed"): each, ("cloned", "future"): 1, ("stats", "malformed"): 2 * each,
                      ("stats", "future"): 1, ("stats-windows", "malformed"): each, ("stats-windows", "future"): 1,
                      ("stats-windows", "unknown source"): 1}
    assert {key: skipped(*key) for key in expected_skips} == expected_skips
    assert metrics[("surveillance_commands_total", "rejected", "watch")] == len(bad_watches)
    assert metrics[("surveillance_commands_total", "rejected", "stat")] == len(bad_stats)
    log = service.text()
    for stage in ("watch", "sightings", "cloned", "stats", "stats-windows"):
        assert f"{stage}: set aside " in log, stage
