"""Live statistics with several instances: district and city results whole, nothing counted twice.

Two ``python -m surveillance --stages stats`` processes share the capture partitions (stage A) and the
repartition topic's partitions (stage B) of a real broker; every final is compared with a tally computed
here, independently, from the records the test published.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from deploy.processes.surveillance import ServiceProcess
from ingest import values
from surveillance.stats_stage import GROUP
from testkit.surveillance import CHECKPOINTS, capture_time, vehicle
from tests.surveillance._support import Site
from tests.surveillance._support_s2 import wait_committed
from tests.surveillance._support_stats import (
    T,
    create_captures,
    finals,
    live_traffic,
    records_per_partition,
    rewind_group,
    stat,
    tally,
    wait_split,
)

PARTITIONS = 3
STAGES = ("stats", "stats-windows")


def two_instances(site: Site, **config: Any) -> list[ServiceProcess]:
    """Two stats processes over 3-partition capture topics (each district spans them), once both stages'
    partitions are split between them."""
    create_captures(site.broker.bootstrap, PARTITIONS)
    services = [site.service("--stages", "stats", **config) for _ in range(2)]
    for service in services:
        service.start()
    wait_split(services, STAGES, PARTITIONS, [0, 0])
    return services


def start(site: Site, commands: list[dict[str, Any]]) -> None:
    for command in commands:
        site.publisher.command(T.control_stats, command["stat_id"], command)
    wanted = {c["stat_id"] for c in commands}
    replies = site.reader(T.surveillance_replies, 1).read(lambda got: {r["id"] for r in got} >= wanted)
    assert {r["status"] for r in replies} == {"accepted"}


def expected_of(commands: list[dict[str, Any]], vehicles: list[dict], faces: list[dict]) -> dict:
    expected: dict[tuple[str, int, str], Any] = {}
    for command in commands:
        expected.update(tally(command, faces if command["measure"] == "face_count" else vehicles))
    return expected


def wrong_finals(got: dict[tuple[str, int, str], list[Any]], expected: dict) -> dict:
    """Keys whose finals (all of them: a duplicate must be identical) differ from the tally."""
    return {k: (got.get(k), v) for k, v in expected.items()
            if not got.get(k) or any(x != pytest.approx(v, abs=0.006) for x in got[k])}


def test_two_instances_publish_whole_district_and_city_results(site: Site) -> None:
    rng = random.Random(41)
    two_instances(site, allowed_lateness_s=2, partial_interval_s=0.5)
    commands = [stat("d-count", "vehicle_count", "district", 2), stat("c-plates", "distinct_plates", "city", 3),
                stat("c-speed", "avg_speed", "city", 2), stat("cp-count", "vehicle_count", "checkpoint", 3),
                stat("d-women", "face_count", "district", 2, filter={"gender": "female"})]
    start(site, commands)
    began = time.monotonic()
    vehicles, faces = live_traffic(site.broker.bootstrap, rng, 8.0)
    spread = records_per_partition(site.broker.bootstrap, T.vehicle, PARTITIONS)
    assert all(spread), f"captures on every partition: {spread}"
    expected = expected_of(commands, vehicles, faces)
    assert {k[2] for k in expected if k[0] == "d-count"} == {"330102", "330106"}

    results = site.reader(T.surveillance_stats)
    got = finals(results.read(lambda r: finals(r).keys() >= expected.keys(), timeout=90, quiet_s=1.5))
    assert got.keys() == expected.keys()
    assert all(len(v) == 1 for v in got.values()), "one final per window and group"
    wrong = wrong_finals(got, expected)
    assert not wrong, list(wrong.items())[:5]
    print(f"two instances: {len(expected)} finals equal to the independent tally "
          f"({len(vehicles)} vehicles, {len(faces)} faces over partitions {spread}), "
          f"last final {time.monotonic() - began:.1f} s after the traffic began")


@pytest.mark.slow
def test_kill_9_of_one_instance_mid_window_then_restart(site: Site) -> None:
    """One of two instances dies under load and comes back: its capture partitions wait for their next
    owner (windows held open), its replayed events are dropped, and every final counts each capture once."""
    rng = random.Random(42)
    services = two_instances(site, allowed_lateness_s=2)
    commands = [stat("d-count", "vehicle_count", "district", 4), stat("c-plates", "distinct_plates", "city", 4),
                stat("c-speed", "avg_speed", "city", 5)]
    start(site, commands)
    with ThreadPoolExecutor(1) as pool:
        traffic = pool.submit(live_traffic, site.broker.bootstrap, rng, 10.0)
        time.sleep(3.0)
        services[1].kill()
        killed = time.monotonic()
        services[1].start()
        print(f"restarted in {time.monotonic() - killed:.1f} s")
        vehicles, faces = traffic.result()
    expected = expected_of(commands, vehicles, faces)

    results = site.reader(T.surveillance_stats)
    got = finals(results.read(lambda r: finals(r).keys() >= expected.keys(), timeout=120, quiet_s=3.0))
    assert got.keys() == expected.keys()
    wrong = wrong_finals(got, expected)
    assert not wrong, list(wrong.items())[:5]
    events = site.reader(T.stat_events, PARTITIONS).read(lambda _r: True, quiet_s=1.0)
    sources = Counter((e["stat_id"], tuple(e["source"])) for e in events if "stat_id" in e)
    print(f"kill -9: {len(expected)} finals equal to the tally; {sum(len(v) - 1 for v in got.values())} "
          f"identical duplicate finals; {sum(n - 1 for n in sources.values())} replayed events dropped")


@pytest.mark.slow
def test_a_replay_of_stage_a_counts_nothing_twice(site: Site) -> None:
    """Stage A re-reads every capture (its offsets rewound, as a crash before a commit does on a smaller
    scale) while the windows are open: the events it publishes again are dropped, not counted."""
    rng = random.Random(43)
    bootstrap = site.broker.bootstrap
    service = site.service("--stages", "stats", allowed_lateness_s=15).start()
    command = stat("c-count", "vehicle_count", "city", 2)
    start(site, [command])

    def batch(tag: str, count: int) -> list[dict]:
        return [vehicle(f"{tag}{n}", rng.choice(CHECKPOINTS), values.plate(rng, "blue"), rng,
                        capture_time(-rng.uniform(0, 1.5))) for n in range(count)]

    first = batch("a", 200)
    site.publisher.captures(T.vehicle, first)
    wait_committed(bootstrap, GROUP, T.vehicle)
    results = site.reader(T.surveillance_stats)
    assert not finals(results.read(lambda _r: True, quiet_s=0.5)), "the windows should still be open"
    service.stop()
    rewind_group(bootstrap, GROUP, T.vehicle, 2)
    service.start()
    second = batch("b", 100)
    site.publisher.captures(T.vehicle, second)
    expected = tally(command, first + second)

    got = finals(results.read(lambda r: finals(r).keys() >= expected.keys(), timeout=90, quiet_s=2.0))
    assert got == {k: [v] for k, v in expected.items()}
    events = site.reader(T.stat_events).read(lambda r: sum("stat_id" in e for e in r) >= 500, quiet_s=0.5)
    assert sum("stat_id" in e for e in events) == 2 * len(first) + len(second), "stage A published again"
