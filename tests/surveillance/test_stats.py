"""Live statistics end to end: the service as a process, commands and captures on a real broker.

Every final result is compared with a tally computed here, independently, from the records the test
published (the same windows by capture time, the same groups, the same filter).
"""

from __future__ import annotations

import random
import time
from typing import Any

import pytest

from ingest import values
from surveillance.stats_stage import GROUP
from testkit.surveillance import CHECKPOINTS, capture_time, city_map, vehicle
from tests.surveillance._support import Site
from tests.surveillance._support_s2 import wait_committed
from tests.surveillance._support_stats import T, finals, live_traffic, stat, tally

MAP_LANES = {c.checkpoint_id: c.lanes for c in city_map().checkpoints}


def test_statistics_equal_an_independent_tally_and_late_records_are_counted(site: Site) -> None:
    rng = random.Random(31)
    site.service(allowed_lateness_s=2, partial_interval_s=0.5).start()
    commands = [stat("s-cp", "vehicle_count", "checkpoint", 2),
                stat("s-district", "distinct_plates", "district", 3),
                stat("s-speed", "avg_speed", "city", 5),
                stat("s-suv", "vehicle_count", "city", 4, filter={"vehicle_type": "suv"}),
                stat("s-women", "face_count", "district", 3, filter={"gender": "female"})]
    for command in commands:
        site.publisher.command(T.control_stats, command["stat_id"], command)
    site.publisher.command(T.control_stats, "s-bad", {**stat("s-bad", "loudness", "city", 10)})
    replies = site.reader(T.surveillance_replies, 1).read(lambda got: len({r["id"] for r in got}) >= 6)
    status = {r["id"]: (r["status"], r["reason"]) for r in replies}
    assert {k: s for k, (s, _r) in status.items()} == {**{c["stat_id"]: "accepted" for c in commands},
                                                        "s-bad": "rejected"}
    assert status["s-bad"][1].startswith("measure:")

    vehicles, faces = live_traffic(site.broker.bootstrap, rng, 12.0)
    expected: dict[tuple[str, int, str], Any] = {}
    for command in commands:
        expected.update(tally(command, faces if command["measure"] == "face_count" else vehicles))

    results = site.reader(T.surveillance_stats)
    got = finals(results.read(lambda r: finals(r).keys() >= expected.keys(), timeout=90, quiet_s=1.0))
    assert got.keys() == expected.keys()
    assert all(len(v) == 1 for v in got.values()), "one final per window and group"
    wrong = {k: (got[k][0], v) for k, v in expected.items() if got[k][0] != pytest.approx(v, abs=0.006)}
    assert not wrong, list(wrong.items())[:5]
    print(f"statistics: {len(expected)} finals equal to the independent tally")
    assert any(not r["final"] for r in results.values()), "partial results while windows were open"

    # Every window above has closed (the input went idle): records for them now are late, and counted.
    late = [vehicle(f"late{n}", CHECKPOINTS[0], "浙A0L001", rng, capture_time(-60)) for n in range(5)]
    site.publisher.captures(T.vehicle, [*late, vehicle("fresh", CHECKPOINTS[0], "浙A0L002", rng)])
    after = results.read(lambda r: any(x["stat_id"] == "s-cp" and x["late_records"] >= 5 for x in r))
    assert max(x["late_records"] for x in after if x["stat_id"] == "s-cp") == 5
    assert all(len(finals(after)[k]) == 1 for k in expected), "a late record changes no final"


@pytest.mark.slow
@pytest.mark.parametrize("group_by", ["district", "lane"])
def test_kill_9_with_an_open_window_re_emits_nothing_and_the_final_counts_everything(site: Site, group_by: str) -> None:
    """Half of a window's records before a kill -9, half after the restart: each group's one final counts all."""
    rng = random.Random(32)
    window_s = 20   # long enough for a kill -9 and a restart, short enough to wait for
    service = site.service(allowed_lateness_s=2).start()
    stat_id = f"s-open-{group_by}"
    command = stat(stat_id, "vehicle_count", group_by, window_s)
    site.publisher.command(T.control_stats, stat_id, command)
    site.reader(T.surveillance_replies, 1).read(lambda got: any(r["id"] == stat_id for r in got))
    while time.time() % window_s > 3:   # start early in a window, so it stays open across the restart
        time.sleep(0.2)
    start_ms = int(time.time() // window_s * window_s * 1000)

    def batch(tag: str, count: int) -> list[dict]:
        now_ms = time.time() * 1000
        assert now_ms < start_ms + window_s * 1000, "the machine is too slow for this window"
        span_s = min(3.0, (now_ms - start_ms - 1) / 1000)
        out = []
        for n in range(count):
            checkpoint = rng.choice(CHECKPOINTS)
            record = vehicle(f"{tag}{group_by}{n}", checkpoint, values.plate(rng, "blue"), rng,
                             capture_time(-rng.uniform(0, span_s)))
            out.append({**record, "lane": rng.randint(1, MAP_LANES[checkpoint])})  # a lane its checkpoint has
        return out

    first = batch("a", 300)
    site.publisher.captures(T.vehicle, first)
    wait_committed(site.broker.bootstrap, GROUP, T.vehicle)
    service.kill()
    service.start()
    second = batch("b", 300)
    site.publisher.captures(T.vehicle, second)
    expected = tally(command, first + second)
    assert {k[1] for k in expected} == {start_ms}
    results = site.reader(T.surveillance_stats)
    got = finals(results.read(lambda r: finals(r).keys() >= expected.keys(), timeout=120, quiet_s=3.0))
    assert got == {k: [v] for k, v in expected.items()}
    assert sum(expected.values()) == 600
