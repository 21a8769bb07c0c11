"""``/api/v1/dr/*`` against a real console, two brokers and a real mirror between them (`python -m dr_mirror`)."""

from __future__ import annotations

import datetime as dt
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from prometheus_client import generate_latest

from contracts import active_site
from contracts.config import load
from contracts.ports import free_port
from contracts.processes import spawn
from deploy.dr_site import mirror_properties
from deploy.processes.broker import BrokerProcess
from deploy.processes.console import Backing, ConsoleProcess, password_of, write_config
from dr_mirror.formats import Checkpoint
from dr_mirror.images import CopierMetrics
from tests.web._bad_records import WRONG_SHAPES, skipped_counts
from tests.web.conftest import ROLES

TOPIC = "capture.vehicle"
GROUP = "dr-api-loader"


@dataclass
class DrSetup:
    dr: BrokerProcess
    mirror: subprocess.Popen[bytes]
    metrics_port: int
    console: ConsoleProcess
    reports: Path
    images: CopierMetrics
    images_server: ThreadingHTTPServer


def dr_console(backing: Backing, dr: BrokerProcess, metrics_port: int, root: Path, *,
               add_users: bool = True, images_port: int | None = None,
               reverse_port: int | None = None) -> ConsoleProcess:
    """A console on ``backing`` whose ``[dr]`` names this DR broker and mirror, with a user of each role;
    ``reverse_port``: the mirror back's metrics (default: a port where none runs).

    ``add_users=False`` when the backing already holds them (the session's shared gateway, where the
    ``console`` fixture made them: adding them twice is refused).

    Started here rather than by ``start_console`` for the ``[dr]`` section, and with a longer start-up wait:
    importing the app takes most of a minute on the shared machine when it is loaded.
    """
    port = free_port()
    config = write_config(root / "console.toml", backing, port, root / "console", lag_sample_interval_s=1)
    with config.open("a") as handle:
        handle.write(f'[dr]\nbootstrap_servers = "{dr.bootstrap}"\nmirror_metrics_port = {metrics_port}\n'
                     f'reverse_mirror_metrics_port = {reverse_port or free_port()}\n'
                     'reports_dir = "drills"\n' + (f"images_metrics_port = {images_port}\n" if images_port else ""))
    log_path = root / "console.log"
    with log_path.open("wb") as log:
        proc = spawn([sys.executable, "-m", "web", "--config", str(config)], log)
    console = ConsoleProcess(proc, port, config, root / "console", log_path, backing)
    try:
        wait_for(lambda: _answers(console) or proc.poll() is not None, 240, "the console answers")
        assert proc.poll() is None, console.log()[-3000:]
        for role in ROLES if add_users else ():
            result = console.cli("users", "add", role, "--role", role, stdin=password_of(role) + "\n")
            assert result.returncode == 0, result.stderr
    except BaseException:
        console.stop()
        raise
    return console


def serve_images(metrics: CopierMetrics) -> ThreadingHTTPServer:
    """The image copier's /metrics, as `python -m dr_mirror.images` serves it, on a server the test can stop."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = generate_latest(metrics.registry)
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _answers(proc: ConsoleProcess) -> bool:
    try:
        return httpx.get(f"{proc.url}/api/v1/health", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def wait_for(condition, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.3)


@pytest.fixture(scope="module")
def setup(console: ConsoleProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DrSetup]:
    console_backing = console.backing
    root = tmp_path_factory.mktemp("dr-api")
    dr = BrokerProcess(root / "dr-bus").start(timeout=120)  # a loaded machine starts processes slowly; root/dr: records
    primary = console_backing.broker.bootstrap
    producer = Producer({"bootstrap.servers": primary})
    for i in range(200):
        producer.produce(TOPIC, f'{{"n": {i}}}'.encode(), str(i).encode())
    assert producer.flush(30) == 0
    metrics_port = free_port()
    (root / "mm2.properties").write_text(mirror_properties(primary, dr.bootstrap, load(), intervals_s=1))
    with (root / "mirror.log").open("wb") as log:
        mirror = spawn([sys.executable, "-m", "dr_mirror", "--config", str(root / "mm2.properties"),
                        "--metrics-port", str(metrics_port)], log)
    images = CopierMetrics()
    images_server = serve_images(images)
    try:
        proc = dr_console(console_backing, dr, metrics_port, root, add_users=False,
                          images_port=images_server.server_address[1])
    except BaseException:
        mirror.terminate()
        dr.stop()
        images_server.shutdown()
        raise
    try:
        yield DrSetup(dr, mirror, metrics_port, proc, root / "drills", images, images_server)
    finally:
        images_server.shutdown()
        proc.stop()
        mirror.terminate()
        mirror.wait(20)
        dr.stop()


def test_lag_is_live_per_partition_and_sampled_into_the_last_hour(setup: DrSetup) -> None:
    viewer = setup.console.client("viewer")
    assert setup.console.client(None).get("/api/v1/dr/lag").status_code == 401

    def mirrored() -> bool:
        response = viewer.get("/api/v1/dr/lag")
        if response.status_code != 200:
            return False
        rows = [p for p in response.json()["partitions"] if p["topic"] == TOPIC]
        return bool(rows) and all(p["lag"] == 0 and not p["stopped"] for p in rows)

    wait_for(mirrored, 60, "the mirror reports capture.vehicle caught up")
    now = viewer.get("/api/v1/dr/lag").json()
    assert all(p["lag_seconds"] == 0.0 for p in now["partitions"] if p["topic"] == TOPIC)
    if now["total"] == 0:  # every topic caught up: nothing would be lost
        assert now["rpo"] == {"records": 0, "seconds": 0.0}
    wait_for(lambda: len(viewer.get("/api/v1/dr/lag/history").json()) >= 2, 30, "two lag samples")
    history = viewer.get("/api/v1/dr/lag/history").json()
    assert history == sorted(history, key=lambda s: s["time_ms"])
    assert any(p["topic"] == TOPIC for p in history[-1]["partitions"]) and history[-1]["total"] >= 0


def test_checkpoints_show_the_group_offset_translated_to_dr(setup: DrSetup) -> None:
    consumer = Consumer({"bootstrap.servers": setup.console.backing.broker.bootstrap, "group.id": GROUP,
                         "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition(TOPIC, 0, 150)], asynchronous=False)
    consumer.close()
    viewer = setup.console.client("viewer")

    def checkpoint() -> dict | None:
        rows = [c for c in viewer.get("/api/v1/dr/checkpoints").json() if c["group"] == GROUP]
        return rows[0] if rows else None

    wait_for(lambda: checkpoint() is not None, 60, "a checkpoint for the group")
    found = checkpoint()
    assert found is not None
    assert (found["topic"], found["partition"], found["upstream_offset"]) == (TOPIC, 0, 150)
    assert found["downstream_offset"] == 150  # identity offsets: the mirror alone writes the DR topic


def test_records_that_are_not_checkpoints_are_left_out_and_counted(setup: DrSetup) -> None:
    """Garbage, the wrong shapes, a group name that is not UTF-8, fields missing, impossible offsets and another
    version in the checkpoints topic, then a group's offset: its checkpoint shows, every answer a 200."""
    good, other = Checkpoint("dr-api-after-garbage", TOPIC, 0, 120, 120), Checkpoint("dr-api-foreign", TOPIC, 0, 1, 1)
    group_key = struct.pack(">h", 4) + b"\xff\xfe-g" + good.key()[len(good.group) + 2:]
    foreign = [(key, value, "bad length") for key, value in zip(WRONG_SHAPES, WRONG_SHAPES, strict=True)]
    foreign += [(group_key, good.value(), "not UTF-8"),
                (good.key()[:-4], good.value(), "bad length"),  # no partition
                (good.key(), good.value()[:10], "bad length"),  # no downstream offset, no metadata
                (other.key(), b"\x00\x00" + struct.pack(">qq", -1, -1) + b"\x00\x00", "negative partition or offset"),
                (other.key(), b"\x00\x07" + other.value()[2:], "unknown version")]
    producer = Producer({"bootstrap.servers": setup.dr.bootstrap})
    for key, value, _reason in foreign:
        producer.produce("primary.checkpoints.internal", value, key=key, partition=0)
    assert producer.flush(10) == 0
    consumer = Consumer({"bootstrap.servers": setup.console.backing.broker.bootstrap, "group.id": good.group,
                         "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition(TOPIC, 0, good.upstream_offset)], asynchronous=False)
    consumer.close()
    viewer = setup.console.client("viewer")

    def shown() -> list[dict]:
        response = viewer.get("/api/v1/dr/checkpoints")
        assert response.status_code == 200, response.text
        return [c for c in response.json() if c["group"] == good.group]

    wait_for(lambda: bool(shown()), 60, "a checkpoint for the group")
    [found] = shown()
    assert (found["topic"], found["upstream_offset"], found["downstream_offset"]) == (TOPIC, 120, 120)
    assert not [c for c in viewer.get("/api/v1/dr/checkpoints").json() if c["group"] == other.group]
    counted: dict[tuple[str, str], int] = {}
    for *_, reason in foreign:
        counted[("primary.checkpoints.internal", reason)] = counted.get(("primary.checkpoints.internal", reason),
                                                                        0) + 1
    # Each record counted once, however often the page reads the topic again.
    assert skipped_counts(httpx.get(f"{setup.console.url}/metrics").text, "dr_checkpoints") == counted


def test_the_image_copiers_lag_and_counts_are_shown_to_viewers(setup: DrSetup) -> None:
    setup.images.copied.inc(7)
    setup.images.skipped.labels("missing_at_source").inc(2)
    setup.images.skipped.labels("malformed").inc()
    setup.images.lag_records.set(12)
    setup.images.lag_seconds.set(3.5)
    assert setup.console.client(None).get("/api/v1/dr/images").status_code == 401
    for role in ROLES:
        response = setup.console.client(role).get("/api/v1/dr/images")
        assert response.status_code == 200, response.text
        found = response.json()
        assert (found["lag_records"], found["lag_seconds"], found["copied"], found["missing_at_source"]) == \
            (12, 3.5, 7, 2)
        assert found["skipped"]["malformed"] == 1 and found["skipped"]["present"] == 0


def test_the_active_site_is_shown_to_viewers_and_a_damaged_record_is_a_503(setup: DrSetup) -> None:
    root = setup.reports.parent  # make up's data dir, as the console sees it (its own dir's parent)
    viewer = setup.console.client("viewer")
    assert httpx.get(f"{setup.console.url}/api/v1/dr/site", timeout=10).status_code == 401
    active_site.path(root).unlink(missing_ok=True)
    assert viewer.get("/api/v1/dr/site").json() == {"active": "primary", "since": None, "reason": "",
                                                    "switching_to": None, "last": None}
    since = dt.datetime(2026, 12, 1, 3, 0, tzinfo=dt.UTC)
    active_site.write(root, active_site.ActiveSite("primary", since, "make up", "dr"))
    assert viewer.get("/api/v1/dr/site").json()["switching_to"] == "dr"
    last = {"planned": False, "from": "primary", "records_lost": 212, "seconds_lost": 1.4, "switch_s": 11.2}
    active_site.write(root, active_site.ActiveSite("dr", since, "switchover: the primary room is on fire", None, last))
    assert viewer.get("/api/v1/dr/site").json() == {
        "active": "dr", "since": since.isoformat(), "reason": "switchover: the primary room is on fire",
        "switching_to": None, "last": {**last, "drained_s": None}}
    lag = viewer.get("/api/v1/dr/lag")  # the DR site active: the lag is the mirror back's, which is not running here
    assert lag.status_code == 503 and lag.json()["backend"] == "dr_mirror", lag.text
    active_site.path(root).write_text('{"active": "moon"')
    response = viewer.get("/api/v1/dr/site")
    assert response.status_code == 503 and response.json()["backend"] == "active_site", response.text
    active_site.path(root).unlink()


def test_lag_answers_503_naming_the_mirror_when_it_is_down(setup: DrSetup) -> None:
    setup.mirror.terminate()
    setup.mirror.wait(20)
    response = setup.console.client("viewer").get("/api/v1/dr/lag")
    assert response.status_code == 503 and response.json()["backend"] == "dr_mirror"


def test_images_answer_503_naming_the_copier_when_it_is_down(setup: DrSetup) -> None:
    setup.images_server.shutdown()
    setup.images_server.server_close()
    response = setup.console.client("viewer").get("/api/v1/dr/images")
    assert response.status_code == 503 and response.json()["backend"] == "dr_images"


def test_a_switchover_is_admin_only_needs_a_reason_is_audited_and_says_what_the_command_said(
        setup: DrSetup) -> None:
    """The console runs `python -m dr_mirror switchover` on make up's data directory. This console's has no
    `solution.toml` (it is not a make up), so the command refuses with exit 2 saying so, and the console shows that;
    tests/dr/test_switchover.py switches a running make up back through the console."""
    admin = setup.console.client("admin")
    body = {"to": "dr", "reason": "planned maintenance"}
    assert setup.console.client(None).post("/api/v1/dr/switchover", json=body).status_code == 401
    for user in ("viewer", "operator"):
        assert setup.console.client(user).post("/api/v1/dr/switchover", json=body).status_code == 403
        assert setup.console.client(user).get("/api/v1/dr/switchover").status_code == 403
    assert admin.get("/api/v1/dr/switchover").json() is None  # none started yet
    for bad in ({"to": "moon", "reason": "why not"}, {"to": "dr"}, {"to": "dr", "reason": ""},
                {"to": "dr", "reason": "x" * 201}):
        assert admin.post("/api/v1/dr/switchover", json=bad).status_code == 422, bad
    started = admin.post("/api/v1/dr/switchover", json=body)
    assert started.status_code == 202, started.text
    assert started.json()["to"] == "dr" and started.json()["reason"] == "planned maintenance"
    wait_for(lambda: not admin.get("/api/v1/dr/switchover").json()["running"], 60, "the switchover command ended")
    ended = admin.get("/api/v1/dr/switchover").json()
    assert ended["exit_code"] == 2 and "solution.toml not found" in ended["said"], ended
    audit = setup.console.audit(lambda found: len(found) >= 1, action="dr.switchover")
    assert audit[0]["outcome"] == "ok" and audit[0]["reason"] == "planned maintenance", audit[0]
    assert audit[0]["target"] == "dr" and audit[0]["query"] == {"force": False}, audit[0]


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_drills_are_admin_only_one_at_a_time_audited_and_listed(setup: DrSetup) -> None:
    admin, viewer = setup.console.client("admin"), setup.console.client("viewer")
    body = {"scenario": "mirror-crash", "ingest": False}
    for user in ("viewer", "operator"):
        assert setup.console.client(user).post("/api/v1/dr/drills", json=body).status_code == 403
    assert admin.post("/api/v1/dr/drills", json={"scenario": "meteor"}).status_code == 422
    started = admin.post("/api/v1/dr/drills", json=body)
    assert started.status_code == 202, started.text
    name = started.json()["name"]
    assert admin.post("/api/v1/dr/drills", json=body).status_code == 409  # one at a time
    audit = setup.console.audit(lambda found: len(found) >= 2, action="dr.drill.start")
    assert [e["outcome"] for e in audit[:2]] == ["refused: drill " + name + " is still running", "ok"]
    wait_for(lambda: not viewer.get("/api/v1/dr/drills/running").json()["running"], 360, "the drill ended")
    assert viewer.get("/api/v1/dr/drills/running").json()["exit_code"] == 0, \
        (setup.reports / name / "drill.log").read_text()[-3000:]
    listed = viewer.get("/api/v1/dr/drills").json()
    assert listed[0]["name"] == name and listed[0]["scenario"] == "mirror-crash"
    assert listed[0]["report"]["missing_at_dr"] == 0
    # a bus-only drill has no object stores: no image count (with ingest, mirror-crash counts them:
    # tests/dr/test_drill.py runs that drill, a minute longer)
    assert "images_missing_at_dr" not in listed[0]["report"]
    report = viewer.get(f"/api/v1/dr/drills/{name}").json()
    assert report["markdown"].startswith("# DR drill: mirror-crash") and report["has_chart"]
    png = viewer.get(f"/api/v1/dr/drills/{name}/png")
    assert png.headers["content-type"] == "image/png" and png.content[:4] == b"\x89PNG"
    assert viewer.get(f"/api/v1/dr/drills/{name}/md").text == report["markdown"]
    assert viewer.get("/api/v1/dr/drills/no-such-drill").status_code == 404
    assert viewer.get("/api/v1/dr/drills/..%2F..%2Fconsole/json").status_code == 404
    assert viewer.get(f"/api/v1/dr/drills/{name}/exe").status_code == 422
