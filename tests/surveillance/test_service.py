"""The service as a group of processes: two instances share the partitions; kill -9 under load loses nothing.

Watched plates use the city letter Z (京Z....), which the simulator's random plates never carry, so the
expected hits are known exactly from the records produced.
"""

from __future__ import annotations

import random
import re
import threading
import time
from collections import Counter

import pytest
from confluent_kafka import Consumer, TopicPartition

from contracts.surveillance import watch_hit_id
from contracts.topics import Topics
from ingest import values
from surveillance.watch_stage import GROUP
from tests.surveillance._support import CHECKPOINTS, ServiceProcess, Site, plate_watch, vehicle

T = Topics()
ASSIGNED = re.compile(r"watch: assigned (\[.*\])")
PARTITION = re.compile(r"\('([^']+)', (\d+)\)")


def watch_hits(hits: list[dict]) -> list[dict]:
    """Hits of the watch stage (the cloned-plate stage also reports watched plates seen too far apart)."""
    return [h for h in hits if h["kind"] != "cloned_plate"]


def last_assignment(service: ServiceProcess) -> set[tuple[str, int]]:
    found = ASSIGNED.findall(service.text())
    return {(topic, int(p)) for topic, p in PARTITION.findall(found[-1])} if found else set()


@pytest.mark.slow
def test_two_instances_share_the_partitions_and_every_hit_arrives_once(site: Site) -> None:
    rng = random.Random(21)
    for n in range(4):
        site.publisher.command(T.control_watchlist, f"w{n}", plate_watch(f"w{n}", f"京Z0000{n}"))
    first, second = site.service().start(), site.service().start()
    wanted = {(topic, p) for topic in T.captures for p in range(2)}
    deadline = time.monotonic() + 60
    while True:
        a, b = last_assignment(first), last_assignment(second)
        if a and b and not a & b and a | b == wanted:
            break
        assert time.monotonic() < deadline, f"assignments {a} / {b}"
        time.sleep(0.5)
    records = [vehicle(f"r{n}", CHECKPOINTS[n % 8], f"京Z0000{n % 4}" if n % 5 == 0 else values.plate(rng, "blue"),
                       rng) for n in range(400)]
    site.publisher.captures(T.vehicle, records)
    expected = {watch_hit_id(r["plate_number"].replace("京Z0000", "w"), r["record_id"])
                for r in records if r["plate_number"].startswith("京Z")}
    assert {p for p, _ in site.publisher.placed.values()} == {0, 1}
    hits = watch_hits(site.reader(T.surveillance_hits).read(lambda got: len(watch_hits(got)) >= len(expected),
                                                            quiet_s=2.0))
    assert Counter(h["hit_id"] for h in hits) == Counter(expected)


@pytest.mark.slow
def test_kill_9_under_load_then_restart_loses_no_watch_and_no_hit(site: Site) -> None:
    rng = random.Random(22)
    watches = {f"k{n}": f"京Z1000{n}" for n in range(5)}
    for watch_id, number in watches.items():
        site.publisher.command(T.control_watchlist, watch_id, plate_watch(watch_id, number))
    service = site.service().start()
    records: list[dict] = []
    stop = threading.Event()
    late_watch = threading.Event()

    def produce() -> None:  # ~250 records/s in batches, a fifth of them watched
        n = 0
        while not stop.is_set():
            batch = []
            for _ in range(25):
                if n % 5 == 0:
                    number = watches[f"k{n // 5 % 5}"] if not late_watch.is_set() or n % 2 else "京Z20000"
                else:
                    number = values.plate(rng, "blue")
                batch.append(vehicle(f"load{n}", CHECKPOINTS[n % 8], number, rng))
                n += 1
            site.publisher.captures(T.vehicle, batch)
            records.extend(batch)
            time.sleep(0.1)

    producer = threading.Thread(target=produce)
    producer.start()
    try:
        time.sleep(4)
        service.kill()
        check = Consumer({"bootstrap.servers": site.broker.bootstrap, "group.id": GROUP, "log_level": 3})
        committed = {tp.partition: tp.offset for tp in check.committed(
            [TopicPartition(T.vehicle, p) for p in range(2)], timeout=10)}
        check.close()
        site.publisher.command(T.control_watchlist, "k-late", plate_watch("k-late", "京Z20000"))
        late_watch.set()  # only records produced from now on carry the late watch's plate
        time.sleep(2)
        service.start()
        time.sleep(3)
    finally:
        stop.set()
        producer.join(30)
    owner = {number: watch_id for watch_id, number in watches.items()} | {"京Z20000": "k-late"}
    expected = {watch_hit_id(owner[r["plate_number"]], r["record_id"]): r["record_id"]
                for r in records if r["plate_number"].startswith("京Z")}
    assert any(r["plate_number"] == "京Z20000" for r in records)
    hits = watch_hits(site.reader(T.surveillance_hits).read(lambda got: {h["hit_id"] for h in got} >= set(expected),
                                                            timeout=90, quiet_s=2.0))
    counts = Counter(h["hit_id"] for h in hits)
    assert set(counts) == set(expected)
    duplicates = [expected[hit_id] for hit_id, count in counts.items() if count > 1]
    print(f"{len(records)} records, {len(expected)} hits expected, committed at kill {committed}, "
          f"{len(duplicates)} duplicated in the replayed range")
    for record_id in duplicates:  # a duplicate is a record after the offset committed before the kill
        partition, offset = site.publisher.placed[record_id]
        assert offset >= committed[partition], (record_id, partition, offset, committed)
