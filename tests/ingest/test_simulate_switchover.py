"""Through real processes: ``python -m ingest.simulate`` with ``[site] record`` follows a planned switchover between
two brokers of ours, a primary and a DR site, with no device reconfigured.

The primary runs an authorizer that lets everyone do everything on a topic without ACLs; the switchover's fence is
an ACL granting ANONYMOUS (every PLAINTEXT client) CREATE only on the simulator's topics, as the fence leaves the
simulator's own grants (its WRITE removed, its CREATE kept, which does not imply DESCRIBE): the primary then refuses
its produce with TOPIC_AUTHORIZATION_FAILED, and its topics' metadata too (the client then refuses at once). The test
reads the primary back once the fence is lifted. The record goes primary -> switching to dr (2 s) -> dr while the
simulator runs at a few hundred records a second. Every record it reports acknowledged is then on exactly one bus,
each bus holds what the simulator says it acknowledged there, each device's records are in order on each bus (what
the primary refused came first at the DR site), and nothing was generated or produced during the hold.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from bus.config.broker import STANDARD_AUTHORIZER
from contracts import active_site
from contracts.topics import Topics
from deploy.processes.broker import BrokerProcess
from testkit.polling import poll

ROOT = Path(__file__).resolve().parents[2]
TOPICS = Topics()
ALL = (TOPICS.vehicle, TOPICS.face, TOPICS.heartbeat)
PARTITIONS = 2
TIMEOUT = 15.0
FENCE = [AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:ANONYMOUS", "*",
                    AclOperation.CREATE, AclPermissionType.ALLOW) for topic in ALL]


def ends(bus: BrokerProcess) -> dict[str, int]:
    """Each of the simulator's topics' records on ``bus`` (the sum of its partitions' end offsets)."""
    consumer = Consumer({"bootstrap.servers": bus.bootstrap, "group.id": "ends", "log_level": 0})
    try:
        return {topic: sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=TIMEOUT)[1]
                           for p in range(PARTITIONS)) for topic in ALL}
    finally:
        consumer.close()


def captures(bus: BrokerProcess) -> dict[tuple[str, int], list[str]]:
    """The record ids of every capture on ``bus``, per topic partition in offset order."""
    expected = ends(bus)
    consumer = Consumer({"bootstrap.servers": bus.bootstrap, "group.id": "check", "enable.auto.commit": False})
    consumer.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t in TOPICS.captures for p in range(PARTITIONS)])
    found: dict[tuple[str, int], list[str]] = {}
    try:
        deadline = time.monotonic() + 60
        while sum(map(len, found.values())) < sum(expected[t] for t in TOPICS.captures):
            assert time.monotonic() < deadline, "the captures on the bus could not be read back"
            for message in consumer.consume(1000, 0.5):
                assert message.error() is None, message.error()
                found.setdefault((message.topic(), message.partition()), []).append(
                    json.loads(message.value())["record_id"])
    finally:
        consumer.close()
    return found


def in_device_order(ids: list[str]) -> bool:
    """Whether each device's records (``<device ip>-<sequence>``) come in its sequence order."""
    last: dict[str, int] = {}
    for record_id in ids:
        device, sequence = record_id.rsplit("-", 1)
        if int(sequence) <= last.get(device, -1):
            return False
        last[device] = int(sequence)
    return True


def captured(bus: BrokerProcess) -> int:
    """The captures on ``bus`` (its topics must be there)."""
    return sum(ends(bus)[t] for t in TOPICS.captures)


def test_the_devices_follow_a_switchover_and_every_acknowledged_record_is_on_exactly_one_bus(
        make_broker: Callable[..., BrokerProcess], tmp_path: Path) -> None:
    primary = make_broker({"authorizer.class.name": STANDARD_AUTHORIZER, "allow.everyone.if.no.acl.found": "true"},
                          name="primary")
    dr = make_broker(name="dr")
    dr_admin = AdminClient({"bootstrap.servers": dr.bootstrap})
    for future in dr_admin.create_topics([NewTopic(t, PARTITIONS) for t in ALL], operation_timeout=TIMEOUT).values():
        future.result(TIMEOUT)  # the mirror's, at a real DR site
    data_dir = tmp_path / "site"

    def say(active: str, switching_to: str | None = None) -> None:
        active_site.write(data_dir, active_site.ActiveSite(active, dt.datetime.now(dt.UTC), "test", switching_to))

    say("primary")
    config = tmp_path / "solution.toml"
    config.write_text(f'[bus]\nbootstrap_servers = "{primary.bootstrap}"\n'
                      f'[dr]\nbootstrap_servers = "{dr.bootstrap}"\n'
                      f'[site]\nname = "primary"\nrecord = "{active_site.path(data_dir)}"\n')
    admin = AdminClient({"bootstrap.servers": primary.bootstrap})
    status = tmp_path / "status.log"
    with status.open("wb") as err:
        simulator = subprocess.Popen(
            [sys.executable, "-m", "ingest.simulate", "--config", str(config), "--map", str(tmp_path / "map.json"),
             "--no-images", "--curve", "flat", "--rate", "300", "--partitions", str(PARTITIONS),
             "--heartbeat-interval", "0.5", "--status-interval", "0.25"],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=err)
    try:
        poll(lambda: set(ALL) <= set(admin.list_topics(timeout=TIMEOUT).topics), timeout=60,
             what="the simulator creating its topics")
        poll(lambda: captured(primary) >= 300, timeout=60, what="the simulator producing to the primary")
        for future in admin.create_acls(FENCE, request_timeout=TIMEOUT).values():
            future.result(TIMEOUT)
        time.sleep(1.5)  # the primary refuses what the devices still send it
        say("primary", switching_to="dr")
        time.sleep(1.0)  # the devices read the record every 0.5 s
        held = ends(dr)  # the primary, fenced, takes nothing (and does not describe its topics to ANONYMOUS)
        time.sleep(1.0)
        assert ends(dr) == held, "something was produced during the hold"
        say("dr")
        poll(lambda: "site dr" in status.read_text(), timeout=60, what="the devices moving to the DR site")
        moved = captured(dr)
        poll(lambda: captured(dr) >= moved + 300, timeout=60, what="new captures at the DR site after the re-sent ones")
    finally:
        simulator.send_signal(signal.SIGTERM)
        out, _ = simulator.communicate(timeout=60)
    assert simulator.returncode == 0, status.read_text()[-3000:]
    summary = json.loads(out.decode().strip().splitlines()[-1])
    for future in admin.delete_acls([AclBindingFilter(ResourceType.TOPIC, None, ResourcePatternType.ANY, None, None,
                                                      AclOperation.ANY, AclPermissionType.ANY)],
                                    request_timeout=TIMEOUT).values():
        future.result(TIMEOUT)  # the fence lifted, to read the primary back

    assert summary["failed"] == 0 and summary["resent"] > 0
    at: dict[str, Counter[str]] = {}
    for site, bus in (("primary", primary), ("dr", dr)):
        acked = summary["sites"][site]
        assert ends(bus) == acked, site  # each bus holds what the simulator says it acknowledged there
        found = captures(bus)
        assert all(in_device_order(ids) for ids in found.values()), site
        at[site] = Counter(record_id for ids in found.values() for record_id in ids)
    assert max((at["primary"] + at["dr"]).values()) == 1  # on exactly one bus, once
    assert sum(at["primary"].values()) + sum(at["dr"].values()) == sum(summary["produced"].values())
    assert summary["heartbeats"] == summary["sites"]["primary"][TOPICS.heartbeat] + summary["sites"]["dr"][
        TOPICS.heartbeat]

    holding = [line for line in status.read_text().splitlines() if "holding at primary" in line]
    assert len(holding) >= 4  # 2 s of hold at a line every 0.25 s
    assert all(re.search(r"\b0 rec/s", line) for line in holding[1:])  # the first also covers the time before
