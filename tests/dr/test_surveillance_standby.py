"""The surveillance service at the DR site stands by, then takes over: real brokers for the two sites, the mirror
as `make up` configures it (``deploy.dr_site.mirror_properties``) and both services as processes.

Standing by, the DR site's service follows the watchlist the mirror brings and publishes nothing (the mirror is the
only writer of the DR site's hits and replies) and joins no group (the mirror keeps the groups' offsets in step).
Once the active-site record names the DR site it consumes from those offsets: what the primary had hit already is
on the DR site's hits topic and is not hit again, and a capture that reaches the DR site after the switch hits once.
"""

from __future__ import annotations

import datetime as dt
import random
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from contracts import active_site
from contracts.config import load
from contracts.ports import free_port
from contracts.topics import Topics
from deploy.dr_site import mirror_properties
from deploy.processes.mirror import MirrorProcess
from deploy.processes.surveillance import ServiceProcess
from ingest import values
from surveillance.watch_stage import GROUP
from testkit.surveillance import CHECKPOINTS, vehicle, write_config
from tests.surveillance._support import Publisher, Reader, plate_watch, scrape

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
T = Topics()
WATCHED = "浙A12345"


def partitions(bootstrap: str, topic: str) -> int:
    return len(AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10).topics[topic].partitions)


def hits(bootstrap: str, quiet_s: float, until: int) -> list[dict]:
    """Every hit on a site's hits topic once there are ``until`` of them and ``quiet_s`` passed with no more."""
    reader = Reader(bootstrap, T.surveillance_hits, partitions(bootstrap, T.surveillance_hits))
    try:
        return reader.read(lambda got: len(got) >= until, 60, quiet_s)
    finally:
        reader.close()


def end_offsets(bootstrap: str, topic: str, missing_ok: bool = False) -> list[int]:
    """Each partition's end offset (none for a topic not there yet when ``missing_ok``)."""
    if missing_ok and topic not in AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics:
        return []
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "log_level": 3})
    try:
        return [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in range(partitions(bootstrap, topic))]
    finally:
        consumer.close()


def wait_until(condition, timeout: float, what: str, logs) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}\n{logs()[-3000:]}"
        time.sleep(0.3)


def captures(prefix: str, count: int, watched: set[int], rng: random.Random) -> list[dict]:
    """Vehicles, the watched plate among them always at one checkpoint (a watch hit, never a cloned plate)."""
    return [vehicle(f"{prefix}{n}", CHECKPOINTS[0], WATCHED, rng) if n in watched
            else vehicle(f"{prefix}{n}", CHECKPOINTS[n % 8], values.plate(rng, "blue"), rng) for n in range(count)]


def test_the_dr_site_stands_by_publishing_nothing_then_takes_over_and_hits_each_capture_once(
        make_broker, tmp_path: Path) -> None:
    rng = random.Random(31)
    primary, dr = make_broker(name="primary"), make_broker(name="dr")
    data = tmp_path / "make-up-data"  # where `make up` keeps the active-site record
    record = active_site.path(data)
    active_site.write(data, active_site.ActiveSite("primary", dt.datetime.now(dt.UTC), "test"))
    (tmp_path / "primary-site").mkdir()
    (tmp_path / "dr-site").mkdir()
    primary_config = write_config(tmp_path / "primary-site", primary.bootstrap)
    dr_config = write_config(tmp_path / "dr-site", dr.bootstrap, metrics_port=free_port())
    with dr_config.open("a") as config:
        config.write(f'[site]\nname = "dr"\nrecord = "{record}"\n')
    at_primary = ServiceProcess(primary_config, tmp_path / "primary.log").start()
    publisher, at_dr_publisher = Publisher(primary.bootstrap), Publisher(dr.bootstrap)
    publisher.command(T.control_watchlist, "w-1", plate_watch("w-1", WATCHED))
    props = tmp_path / "mm2.properties"
    props.write_text(mirror_properties(primary.bootstrap, dr.bootstrap, load(primary_config), intervals_s=1.0))
    mirror = MirrorProcess(["--config", str(props)], tmp_path / "mirror.log")
    at_dr = ServiceProcess(dr_config, tmp_path / "dr.log")
    try:
        with ThreadPoolExecutor(1) as pool:  # the DR site's service starts first: it waits for what the mirror brings
            started = pool.submit(at_dr.start, 90)
            time.sleep(3)
            assert not started.done() and not end_offsets(dr.bootstrap, T.control_watchlist, missing_ok=True)
            mirror.start()
            started.result()
        assert "standing by: site dr is not the active one" in at_dr.text()
        assert scrape(at_dr.metrics_url())[("surveillance_stage_active", "watch")] == 0
        # ready once the mirror has made its topics; the watch it copies a moment later
        wait_until(lambda: end_offsets(dr.bootstrap, T.control_watchlist) == [1], 30, "the watch mirrored",
                   mirror.logs)
        # Standing by costs next to nothing (it reads only its command topics), whatever the captures flowing in.
        standby = psutil.Process(at_dr.process.pid)  # type: ignore[union-attr]
        cpu = sum(standby.cpu_times()[:2])
        for n in range(10):
            publisher.captures(T.vehicle, captures(f"idle{n}-", 200, set(), rng))
            time.sleep(1)
        share = (sum(standby.cpu_times()[:2]) - cpu) / 10
        print(f"the standing-by service used {share:.1%} of a core while 200 captures/s arrived")
        assert share < 0.1
        before = captures("a", 300, {7, 70, 170, 250}, rng)
        publisher.captures(T.vehicle, before)
        first = hits(primary.bootstrap, 0, 4)
        assert sorted(h["record_id"] for h in first) == ["a170", "a250", "a7", "a70"]
        # Standing by, the DR site's service published nothing: its hits and replies are the mirrored ones.
        for topic in (T.surveillance_hits, T.surveillance_replies):
            wait_until(lambda t=topic: end_offsets(dr.bootstrap, t) == end_offsets(primary.bootstrap, t), 60,
                       f"{topic} mirrored", mirror.logs)
        time.sleep(2)
        for topic in (T.surveillance_hits, T.surveillance_replies):
            assert end_offsets(dr.bootstrap, topic) == end_offsets(primary.bootstrap, topic), at_dr.text()[-3000:]
        # The primary's watch group is in step at the DR site (the standing-by service is not in it).
        wait_until(lambda: committed(dr.bootstrap) == committed(primary.bootstrap) != {}, 60,
                   "the watch group's offsets at the DR site", mirror.logs)
        # The primary is lost with every capture's hit published but its offsets at the DR site behind them (as if
        # it died before committing): the DR site consumes them all again, and must hit none of them twice.
        at_primary.kill()
        mirror.kill()
        rewind(dr.bootstrap)
        active_site.write(data, active_site.ActiveSite("dr", dt.datetime.now(dt.UTC), "primary lost"))
        after = captures("b", 100, {3, 55, 99}, rng)
        at_dr_publisher.captures(T.vehicle, after)  # the devices now send to the DR site
        found = hits(dr.bootstrap, 3.0, 4 + 3)
        assert sorted(h["record_id"] for h in found) == ["a170", "a250", "a7", "a70", "b3", "b55", "b99"], \
            at_dr.text()[-3000:]
        assert len({h["hit_id"] for h in found}) == len(found)
        counted = scrape(at_dr.metrics_url())
        assert counted[("surveillance_stage_active", "watch")] == 1
        assert counted[("surveillance_hits_total", "exact", "plate")] == 3  # the primary's 4 were not published again
        assert "the site is active: joining group" in at_dr.text()
        # Failback: the DR site stands by again, with what it consumed committed, and hits nothing more.
        active_site.write(data, active_site.ActiveSite("primary", dt.datetime.now(dt.UTC), "failback"))
        wait_until(lambda: f"watch: the site stands by: leaving group {GROUP}" in at_dr.text(), 30,
                   "the DR site's watch stage standing by again", at_dr.text)
        ends = end_offsets(dr.bootstrap, T.vehicle)
        assert committed(dr.bootstrap) == {(T.vehicle, p): end for p, end in enumerate(ends)}
        at_dr_publisher.captures(T.vehicle, captures("c", 10, {0}, rng))
        assert len(hits(dr.bootstrap, 3.0, 7)) == 7
    finally:
        at_dr.stop()
        at_primary.stop()
        mirror.stop()
        publisher.close()
        at_dr_publisher.close()


def committed(bootstrap: str) -> dict[tuple[str, int], int]:
    """The watch group's committed offsets on the vehicle captures at a site."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    result = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(GROUP)])[GROUP].result(timeout=10)
    return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions
            if tp.topic == T.vehicle and tp.offset >= 0}


def rewind(bootstrap: str) -> None:
    """The watch group's offsets at a site back to the start of the vehicle captures."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    parts = [TopicPartition(T.vehicle, p, 0) for p in range(partitions(bootstrap, T.vehicle))]
    admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(GROUP, parts)])[GROUP].result(timeout=10)
