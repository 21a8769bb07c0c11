"""`python -m dr_mirror switchover` against a running `make up`: a planned switchover to the DR site and the failback
under the capture devices' load (the simulator following the active-site record as make up's config tells it), with
a second switchover asked meanwhile.

An unplanned switchover: the primary's bus killed (kill -9) under the same load; the switchover is refused without
``--force`` (saying what would be lost), then forced; the devices give up the lost bus and go on at the DR site, and
the captures lost are within what the mirror reported behind when the primary went.

What the planned one checks: one switchover wins and the other is told another is under way; the devices are
fenced at the site left (the simulator's own identity is refused there) while that bus stays readable; the status
says which site is active and what the switchover cost (0 records lost); the mirror back to the primary copies what
the devices wrote at the DR site; the failback, asked for through the console as an admin on the DR page would,
switches back and the mirror forward resumes; at the end both sites hold every capture the devices had
acknowledged, once, at the same offsets, and the simulator lost none.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition

from contracts import active_site
from contracts.ports import free_port
from contracts.processes import ROOT, spawn
from contracts.topics import Topics
from deploy.processes.make_up import MAKE_UP_PORTS, bus_settings, console_client, down, start_up, write_config
from testkit.polling import poll

TOPICS = Topics()
TIMEOUT = 15.0


def ends(settings: dict[str, str]) -> dict[tuple[str, int], int]:
    """Each capture partition's end offset on one site's bus (none while its topics are not there)."""
    consumer = Consumer({**settings, "group.id": "switchover-ends", "log_level": 0})
    try:
        found = {}
        for topic in TOPICS.captures:
            meta = consumer.list_topics(topic, timeout=TIMEOUT).topics[topic]
            for partition in meta.partitions if meta.error is None else ():
                found[(topic, partition)] = consumer.get_watermark_offsets(TopicPartition(topic, partition),
                                                                           timeout=TIMEOUT)[1]
        return found
    finally:
        consumer.close()


def record_ids(settings: dict[str, str]) -> dict[tuple[str, int], list[str]]:
    """The record ids of every capture on one site's bus, per partition in offset order."""
    expected = ends(settings)
    consumer = Consumer({**settings, "group.id": "switchover-check", "enable.auto.commit": False, "log_level": 0})
    consumer.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t, p in expected])
    found: dict[tuple[str, int], list[str]] = {key: [] for key in expected}
    try:
        deadline = time.monotonic() + 90
        while sum(map(len, found.values())) < sum(expected.values()):
            assert time.monotonic() < deadline, "the captures on the bus could not be read back"
            for message in consumer.consume(1000, 0.5):
                assert message.error() is None, message.error()
                found[(message.topic(), message.partition())].append(json.loads(message.value())["record_id"])
    finally:
        consumer.close()
    return found


@dataclass
class Devices:
    """The capture simulator at 200 captures/s with make up's config (so following the active site); its summary
    once stopped."""

    summary: dict[str, Any] = field(default_factory=dict)


@contextlib.contextmanager
def devices(tmp_path: Path, data_dir: Path) -> Iterator[Devices]:
    """The devices running for the block: their status lines in ``simulator.log``, their summary read at its end."""
    with (tmp_path / "simulator.log").open("wb") as log:
        proc = spawn([sys.executable, "-m", "ingest.simulate", "--config", str(data_dir / "solution.toml"), "--map",
                      str(tmp_path / "map.json"), "--no-images", "--curve", "flat", "--rate", "200",
                      "--status-interval", "1"], subprocess.PIPE, stderr=log)
    running = Devices()
    try:
        yield running
    finally:
        proc.send_signal(signal.SIGTERM)
        said, _ = proc.communicate(timeout=120)
        lines = said.decode().strip().splitlines()
        running.summary = json.loads(lines[-1]) if lines else {}


def switchover(data_dir: Path, to: str, reason: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "dr_mirror", "switchover", "--to", to, "--data-dir", str(data_dir),
                             "--reason", reason], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def refused_to_simulator(data_dir: Path) -> bool:
    """Whether the primary's bus refuses a capture from the devices' identity (the fence)."""
    producer = Producer({**bus_settings(data_dir, "simulator"), "message.timeout.ms": 10_000, "log_level": 0})
    errors: list[KafkaError | None] = []
    try:
        producer.produce(TOPICS.vehicle, b'{"probe": "fenced?"}', on_delivery=lambda error, _m: errors.append(error))
    except KafkaException as exc:
        errors.append(exc.args[0])
    producer.flush(15)
    return bool(errors) and errors[0] is not None and errors[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


@dataclass
class Solution:
    """A running `make up` (without its pipeline: the test runs the devices) and what it printed."""

    data_dir: Path
    output: str
    console_port: int


@pytest.fixture
def solution(tmp_path: Path) -> Iterator[Solution]:
    ports = {name: free_port() for name in MAKE_UP_PORTS}
    config = write_config(tmp_path, ports)
    data_dir = tmp_path / "data"
    proc, output = start_up(config, data_dir, ports, timeout=180)
    try:
        yield Solution(data_dir, output, ports["console"])
    finally:
        down(data_dir, proc)


def failback_through_the_console(solution: Solution) -> None:
    """The failback as an admin asks for it on the DR page: with a reason, audited, followed until it ends."""
    password = (solution.data_dir / "console" / "admin_password").read_text().strip()
    with console_client(solution.data_dir, solution.console_port) as console:
        token = console.post("/api/v1/auth/token", data={"username": "admin", "password": password}).json()
        auth = {"Authorization": f"Bearer {token['access_token']}"}
        started = console.post("/api/v1/dr/switchover", json={"to": "primary", "reason": "failback, for the test"},
                               headers=auth)
        assert started.status_code == 202, started.text
        poll(lambda: not console.get("/api/v1/dr/switchover", headers=auth).json()["running"], 180,
             what="the failback the console started")
        ended = console.get("/api/v1/dr/switchover", headers=auth).json()
        assert ended["exit_code"] == 0 and "active: primary (since " in ended["said"], ended
        site = console.get("/api/v1/dr/site", headers=auth).json()
        assert site["active"] == "primary" and site["last"]["from"] == "dr" and site["last"]["records_lost"] == 0


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_planned_switchover_and_failback_under_load_lose_nothing(tmp_path: Path, solution: Solution) -> None:
    data_dir = solution.data_dir
    assert "dr mirror" in solution.output, solution.output
    primary, dr = bus_settings(data_dir), bus_settings(data_dir, section="dr")
    with devices(tmp_path, data_dir) as running:
        poll(lambda: sum(ends(primary).values()) >= 400, 90, what="captures at the primary")

        first = switchover(data_dir, "dr", "planned, for the test")
        time.sleep(1.5)
        second = switchover(data_dir, "dr", "asked twice")
        answers = [(p.wait(180), *p.communicate()) for p in (first, second)]
        won = [a for a in answers if a[0] == 0]
        told = [a for a in answers if a[0] == 1]
        assert len(won) == 1 and len(told) == 1, answers
        assert "another switchover is under way" in told[0][2], answers
        assert "drained in" in won[0][1] and "active: dr (since " in won[0][1], answers
        record = active_site.read(data_dir)
        assert record is not None and record.active == "dr" and record.switching_to is None, record
        assert record.last is not None and record.last["planned"] and record.last["records_lost"] == 0, record

        assert refused_to_simulator(data_dir)  # the old primary refuses the devices; its bus answers readers
        status = subprocess.run([sys.executable, "-m", "dr_mirror", "status", "--data-dir", str(data_dir)],
                                cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert status.stdout.startswith("active: dr (since "), status
        assert "last switchover: planned, from primary: 0 records lost" in status.stdout, status.stdout
        assert "losing the DR site now would lose" in status.stdout, status.stdout  # the mirror back's lag

        at_switch = sum(ends(primary).values())
        poll(lambda: sum(ends(primary).values()) >= at_switch + 400, 120,
             what="the devices' captures at the DR site mirrored back to the primary")

        failback_through_the_console(solution)
        at_failback = sum(ends(dr).values())
        poll(lambda: sum(ends(dr).values()) >= at_failback + 400, 120,
             what="the devices' captures at the primary mirrored to the DR site again")
    summary = running.summary
    assert summary["failed"] == 0, summary
    acked = sum(summary["produced"].values())
    assert all(summary["sites"][site][topic] > 0 for site in ("primary", "dr") for topic in TOPICS.captures), summary
    poll(lambda: ends(dr) == ends(primary), 120, what="the DR site holding what the primary holds")
    on_primary, on_dr = record_ids(primary), record_ids(dr)
    assert on_primary == on_dr  # the same records at the same offsets at both sites
    counts = Counter(record_id for ids in on_primary.values() for record_id in ids)
    assert sum(counts.values()) == acked and max(counts.values()) == 1, (sum(counts.values()), acked)


def kill_primary_bus(data_dir: Path) -> int:
    """SIGKILL every node of the primary's bus (make up runs on, as the rest of a room would); how many."""
    nodes = str(data_dir / "bus-cluster")
    killed = 0
    for proc in psutil.process_iter(["cmdline"]):
        if any(nodes in arg and arg.endswith(".properties") for arg in proc.info["cmdline"] or ()):
            os.kill(proc.pid, signal.SIGKILL)
            killed += 1
    return killed


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_an_unplanned_switchover_is_forced_and_loses_no_more_than_the_mirror_was_behind(
        tmp_path: Path, solution: Solution) -> None:
    data_dir = solution.data_dir
    dr = bus_settings(data_dir, section="dr")
    with devices(tmp_path, data_dir) as running:
        poll(lambda: sum(ends(dr).values()) >= 400, 120, what="captures mirrored to the DR site")
        before = active_site.read(data_dir)
        assert kill_primary_bus(data_dir) >= 1

        refused = switchover(data_dir, "dr", "the primary room is lost")
        out, err = refused.communicate(timeout=180)
        assert refused.returncode == 1, (out, err)
        assert "the primary site's bus does not answer" in err and "--force" in err, err
        assert active_site.read(data_dir) == before  # nothing changed

        forced = subprocess.run([sys.executable, "-m", "dr_mirror", "switchover", "--to", "dr", "--force",
                                 "--data-dir", str(data_dir), "--reason", "the primary room is lost"],
                                cwd=ROOT, capture_output=True, text=True, timeout=180)
        assert forced.returncode == 0, forced
        record = active_site.read(data_dir)
        assert record is not None and record.active == "dr" and record.last is not None, record
        assert not record.last["planned"] and record.last["records_lost"] is not None, record.last
        at_switch = sum(ends(dr).values())
        poll(lambda: sum(ends(dr).values()) >= at_switch + 400, 120,
             what=f"the devices going on at the DR site; log: {tmp_path / 'simulator.log'}")
    summary = running.summary
    assert summary["failed"] == 0 and summary["sites"]["dr"][TOPICS.vehicle] > 0, summary
    at_dr = Counter(record_id for ids in record_ids(dr).values() for record_id in ids)
    lost = sum(summary["produced"].values()) - len(at_dr)
    # what the mirror had not seen when the bus died: at most the records its last fetch could not know of, one
    # second of the devices' writes beyond the lag it reported
    assert 0 <= lost <= record.last["records_lost"] + 200, (lost, record.last)
