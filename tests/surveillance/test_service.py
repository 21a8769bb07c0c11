"""The service as a group of processes: two instances share the partitions; kill -9 under load loses nothing.

Watched plates use the city letter Z (京Z....), which the simulator's random plates never carry, so the
expected hits are known exactly from the records produced.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from contracts.ports import free_port
from contracts.surveillance import watch_hit_id
from contracts.topics import Topics
from ingest import values
from surveillance import cloned_stage, stats_stage, stats_windows_stage, watch_stage
from testkit.surveillance import CHECKPOINTS, vehicle
from tests.surveillance._support import ServiceProcess, Site, plate_watch, scrape

T = Topics()
GROUP_INPUTS = {watch_stage.GROUP: T.captures, cloned_stage.SIGHTINGS_GROUP: (T.vehicle,),
                cloned_stage.CLONED_GROUP: (T.plate_sightings,), stats_stage.GROUP: T.captures,
                stats_windows_stage.GROUP: (T.stat_events,)}
"""Every consumer group of the service and the topics (2 partitions each here) its members share."""


def watch_hits(hits: list[dict]) -> list[dict]:
    """Hits of the watch stage (the cloned-plate stage also reports watched plates seen too far apart)."""
    return [h for h in hits if h["kind"] != "cloned_plate"]


def shares(admin: AdminClient, group: str) -> dict[str, set[tuple[str, int]]]:
    """The group's members as the broker's DescribeGroups has them: client id -> partitions assigned (none
    while the group is still forming)."""
    try:
        described = admin.describe_consumer_groups([group])[group].result(10)
    except KafkaException:
        return {}
    return {m.client_id: {(tp.topic, tp.partition) for tp in m.assignment.topic_partitions}
            for m in described.members}


def split_by_process(bootstrap: str, services: list[ServiceProcess]) -> dict[str, list[set[tuple[str, int]]]]:
    """Per group, each process's share (by the pid its client id ends in), once every group has exactly one
    member per process and their shares are disjoint, non-empty and cover the group's input partitions."""
    pids = [str(s.process.pid) for s in services if s.process is not None]
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    deadline = time.monotonic() + 60
    while True:
        found = {group: shares(admin, group) for group in GROUP_INPUTS}
        split = {group: [{tp for client, held in members.items() if client.endswith(f":{pid}") for tp in held}
                         for pid in pids]
                 for group, members in found.items()}
        if all(len(found[g]) == len(pids) and all(held) and sum(map(len, held)) == len(set().union(*held))
               and set().union(*held) == {(t, p) for t in GROUP_INPUTS[g] for p in range(2)}
               for g, held in split.items()):
            return split
        assert time.monotonic() < deadline, f"groups not split between {pids}: {found}"
        time.sleep(0.5)


def test_a_second_instance_from_the_same_config_runs_and_takes_half_the_partitions(site: Site) -> None:
    """Scaling out is the same command line again, on the same host: the configured metrics port is taken by
    the first instance, so the second serves /metrics on a free one; the pid in each instance's name keeps
    the two apart in every group (the config names the instance), and each matches its share of captures."""
    rng = random.Random(21)
    for n in range(4):
        site.publisher.command(T.control_watchlist, f"w{n}", plate_watch(f"w{n}", f"京Z0000{n}"))
    config = {"metrics_port": free_port(), "instance": "city-a"}
    first, second = site.service(**config), site.service(**config)
    assert (first.config, first.args) == (second.config, second.args)
    first.start()
    second.start()
    split = split_by_process(site.broker.bootstrap, [first, second])
    urls = [first.metrics_url(), second.metrics_url()]
    assert urls[0] == f"http://127.0.0.1:{config['metrics_port']}/metrics" != urls[1]
    assert "is taken" in second.text()
    records = [vehicle(f"r{n}", CHECKPOINTS[n % 8], f"京Z0000{n % 4}" if n % 5 == 0 else values.plate(rng, "blue"),
                       rng) for n in range(400)]
    site.publisher.captures(T.vehicle, records)
    expected = {watch_hit_id(r["plate_number"].replace("京Z0000", "w"), r["record_id"])
                for r in records if r["plate_number"].startswith("京Z")}
    assert {p for p, _ in site.publisher.placed.values()} == {0, 1}
    hits = watch_hits(site.reader(T.surveillance_hits).read(lambda got: len(watch_hits(got)) >= len(expected),
                                                            quiet_s=2.0))
    assert Counter(h["hit_id"] for h in hits) == Counter(expected)
    # each instance matched the captures of its own vehicle partition, and its own /metrics says so
    held = [{p for topic, p in share if topic == T.vehicle} for share in split[watch_stage.GROUP]]
    for url, partitions in zip(urls, held, strict=True):
        mine = sum(site.publisher.placed[r["record_id"]][0] in partitions for r in records
                   if r["plate_number"].startswith("京Z"))
        assert scrape(url)[("surveillance_hits_total", "exact", "plate")] == mine > 0
    assert all(s.process is not None and s.process.poll() is None for s in (first, second))
    print(f"metrics at {urls}; shares {split}")


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
        check = Consumer({"bootstrap.servers": site.broker.bootstrap, "group.id": watch_stage.GROUP, "log_level": 3})
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
