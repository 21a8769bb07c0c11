"""The DR site under `make up`: the DR bus (secured, its own identities), the mirror (data topics only) and, with
--dr-site, DR HBase + loaders (as the dr-loaders principal)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import happybase
import httpx
import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from minio import Minio

from contracts import bus_client, s3_credentials
from contracts.config import load
from contracts.ports import free_port
from contracts.processes import spawn
from contracts.topics import Topics
from deploy.dr_site import DrSettings, loaders_config, mirror_properties
from deploy.object_store import free_port_pair
from deploy.processes.ingest import simulate
from deploy.processes.make_up import MAKE_UP_PORTS, bus_settings, console_client, down, write_config
from dr_mirror.settings import load as load_properties
from testkit.polling import poll
from tests.integration._ingest_support import row_counts
from web.auth.sessions import COOKIE_NAME

TOPICS = Topics()


def test_generated_properties_mirror_data_topics_and_leave_control_topics(tmp_path: Path) -> None:
    (tmp_path / "mm2.properties").write_text(mirror_properties("p:1", "d:2", load()))
    settings = load_properties(tmp_path / "mm2.properties", {})  # no solution defaults: the file says it all
    assert (settings.source_bootstrap, settings.target_bootstrap, settings.sync_group_offsets) == ("p:1", "d:2", True)
    assert all(settings.mirrors_topic(t) for t in TOPICS.data())
    assert not any(settings.mirrors_topic(t) for t in TOPICS.control())
    assert not settings.mirrors_topic("capture.vehicle.other")  # names, not prefixes


def test_loaders_config_points_at_the_dr_site_and_publishes_off_the_mirrored_topics(tmp_path: Path) -> None:
    dr = DrSettings.from_config(load(), tmp_path)
    data = loaders_config(load(), dr)
    assert data["bus"]["bootstrap_servers"] == "127.0.0.1:19092"  # type: ignore[index]
    assert data["hbase"]["port"] == 19090  # type: ignore[index]
    assert data["topics"]["ingest_stats"] not in TOPICS.data()  # type: ignore[index]
    assert data["topics"]["deadletter"] not in TOPICS.data()  # type: ignore[index]
    assert data["topics"]["vehicle"] == TOPICS.vehicle  # type: ignore[index]


def _high_watermarks(settings: dict[str, str], topics: list[str],
                     missing_ok: bool = False) -> dict[tuple[str, int], int]:
    """Each partition's end offset; a topic not there yet has none (``missing_ok``) or fails the test."""
    consumer = Consumer({**settings, "group.id": "t", "log_level": 0})
    try:
        known = {t: consumer.list_topics(t, timeout=10).topics[t] for t in topics}
        return {(t, p): consumer.get_watermark_offsets(TopicPartition(t, p), timeout=10)[1]
                for t, meta in known.items() if not (missing_ok and meta.error) for p in meta.partitions}
    finally:
        consumer.close()


def _images(endpoint: str, secrets: Path) -> dict[str, bytes]:
    """Every object of a store's ``captures`` bucket, read as its admin."""
    key = s3_credentials.read_file(secrets / s3_credentials.file_name("admin"))
    client = Minio(endpoint, access_key=key.access_key, secret_key=key.secret_key, secure=False, region="us-east-1")
    found = {}
    for obj in client.list_objects("captures", recursive=True):
        response = client.get_object("captures", obj.object_name)
        found[obj.object_name] = response.read()
        response.close()
        response.release_conn()
    return found


@pytest.mark.slow
@pytest.mark.xdist_group("spark")
@pytest.mark.timeout(720)
def test_make_up_mirrors_to_the_dr_site_and_its_ingest_fills_dr_hbase(tmp_path: Path) -> None:
    ports = {name: free_port() for name in (*MAKE_UP_PORTS, "drh", "dri", "drcon")} | {"drs": free_port_pair()}
    config = write_config(tmp_path, ports)
    data_dir = tmp_path / "data"
    out = tmp_path / "up.out"
    proc = spawn([sys.executable, "-m", "deploy.up", "--config", str(config), "--data-dir",
                  str(data_dir), "--no-pipeline", "--dr-site", "--kafka-port", str(ports["bus"]),
                  "--controller-port", str(ports["controller"]),
                  "--hbase-port", str(ports["hbase"]), "--console-port", str(ports["console"])], out)
    try:
        poll(lambda: "Press Ctrl-C" in out.read_text() or proc.poll() is not None, 180, what="make up")
        said = out.read_text()
        assert proc.poll() is None, said
        assert f"127.0.0.1:{ports['dr']}" in said and "dr mirror" in said and "dr ingest job" in said, said
        primary, dr = bus_settings(data_dir), bus_settings(data_dir, section="dr")  # each site's super user
        assert dr["bootstrap.servers"] == f"127.0.0.1:{ports['dr']}" and dr["security.protocol"] == "SASL_SSL"
        assert dr["sasl.password"] != primary["sasl.password"]  # the DR site's own credentials
        with pytest.raises(KafkaException):  # no client without its identity at the DR site either
            AdminClient({"bootstrap.servers": dr["bootstrap.servers"], "log_level": 0}).list_topics(timeout=5)
        loaders = load(data_dir / "dr" / "solution.toml")
        assert bus_client.properties_dir(loaders) == data_dir / "secrets" / "dr"  # as dr-loaders, at the DR site
        control = Producer(bus_settings(data_dir, "console"))  # the console's principal writes commands
        control.produce(TOPICS.control_watchlist, b"{}", b"w1")
        control.produce(TOPICS.video_commands, b"{}", b"v1")
        assert control.flush(30) == 0
        summary = simulate(primary["bootstrap.servers"], tmp_path, "--count", "300", "--rate", "300", "--seed", "5",
                           "--config", str(data_dir / "solution.toml"),  # as the simulator principal
                           "--s3-credentials", str(data_dir / "secrets" / "s3-simulator.env"))  # images on
        sent = sum(summary["produced"].values())
        captures = list(TOPICS.captures)
        poll(lambda: _high_watermarks(dr, captures) == _high_watermarks(primary, captures), 120, what="mirrored")
        # the DR site's surveillance service and monitor stand by (the watchlist followed is the mirrored one)
        for name in ("dr-surveillance", "dr-monitor"):
            standby_log = data_dir / "dr" / f"{name}.log"
            poll(lambda log=standby_log: "standing by: site dr is not the active one" in log.read_text(), 60,
                 what=f"the DR site's {name} standing by; log: {standby_log}")
        status = subprocess.run([sys.executable, "-m", "dr_mirror", "status", "--data-dir", str(data_dir)],
                                capture_output=True, text=True, timeout=60, check=False)  # on the running make up
        assert status.returncode == 0 and status.stdout.startswith("active: primary (since "), status
        assert "capture.vehicle" in status.stdout, status.stdout
        # the image at the DR site after mirroring: every capture image copied there, the same bytes
        assert "dr images" in said and "dr object store" in said, said
        images = _images(f"127.0.0.1:{ports['s3']}", data_dir / "secrets")
        assert len(images) > 200, summary
        poll(lambda: _images(f"127.0.0.1:{ports['drs']}", data_dir / "secrets" / "dr-object-store") == images, 120,
             what=f"the images at the DR site; log: {data_dir / 'dr' / 'dr-images.log'}")
        password = (data_dir / "console" / "admin_password").read_text().strip()
        with console_client(data_dir, ports["console"]) as console:  # its DR page reads the DR bus as `console`
            token = console.post("/api/v1/auth/token", data={"username": "admin", "password": password}).json()
            shown = console.get("/api/v1/dr/checkpoints",
                                headers={"Authorization": f"Bearer {token['access_token']}"})
            assert shown.status_code == 200, shown.text
        conn = happybase.Connection("127.0.0.1", ports["drh"], timeout=60_000)
        landed = lambda: row_counts(conn)  # noqa: E731 - read again on every poll
        # The DR ingest job starts with make up and reads the mirrored topics once Spark is up: on a loaded
        # machine that took 3.5 minutes (a fresh-clone CI run), so the rows get 6 minutes.
        poll(lambda: sum(landed()[t] for t in ("vehicle", "face", "capture_unrecognized")) == sent, 360,
             what=f"{sent} records in DR HBase; log: {data_dir / 'dr' / 'dr-ingest-job.log'}")
        time.sleep(2)  # the mirror's topic refresh has long passed: a control topic would be there by now
        names = Consumer({**dr, "group.id": "t"}).list_topics(timeout=10).topics
        assert TOPICS.video_commands not in names and TOPICS.vehicle in names
        # the watchlist (a compacted command topic) is mirrored: the DR site's surveillance takes over with it
        watches = _high_watermarks(primary, [TOPICS.control_watchlist])
        assert sum(watches.values()) >= 1
        poll(lambda: _high_watermarks(dr, [TOPICS.control_watchlist], missing_ok=True) == watches, 30,
             what="the watchlist at the DR site")
        assert "dr." + TOPICS.ingest_stats in names  # the DR ingest publishes beside, not into, the mirrored topic
        consoles_follow_the_active_site(data_dir, ports["console"], ports["drcon"], password)
    finally:
        down(data_dir, proc)


def consoles_follow_the_active_site(data_dir: Path, primary_port: int, dr_port: int, password: str) -> None:
    """The DR console stands by with the primary's users and sessions (through the mirrored accounts topic), then a
    planned switchover: the DR console acts, the primary's sends its pages there, and a user made at the DR site
    reaches the primary (through the mirror back)."""
    dr_url = f"https://127.0.0.1:{dr_port}"
    html = {"Accept": "text/html"}
    with console_client(data_dir, primary_port) as primary, console_client(data_dir, dr_port) as dr:
        token = primary.post("/api/v1/auth/token", data={"username": "admin", "password": password}).json()
        auth = {"Authorization": f"Bearer {token['access_token']}"}
        login = primary.post("/api/v1/auth/session", data={"username": "admin", "password": password})
        assert login.status_code == 200, login.text
        session = {COOKIE_NAME: login.cookies[COOKIE_NAME]}
        made = primary.post("/api/v1/users", json={"username": "night-shift", "password": "a-long-night-shift-pass",
                                                    "role": "operator"}, headers=auth)
        assert made.status_code == 201, made.text

        def users_at(console: httpx.Client) -> set[str]:
            return {u["username"] for u in console.get("/api/v1/users", headers=auth).json()}

        poll(lambda: "night-shift" in users_at(dr), 60, what="the primary's new user at the DR console")
        poll(lambda: dr.get("/api/v1/auth/me", cookies=session).status_code == 200, 30,
             what="the primary's session at the DR console")
        site = dr.get("/api/v1/site", headers=auth).json()
        assert site["acting"] is False and site["active"] == "primary", site
        assert site["active_console"] == f"https://127.0.0.1:{primary_port}", site
        refused = dr.post("/api/v1/users", json={"username": "refused", "password": "a-long-refused-password",
                                                 "role": "viewer"}, headers=auth)
        assert refused.status_code == 409, refused.text

        moved = subprocess.run([sys.executable, "-m", "dr_mirror", "switchover", "--to", "dr", "--data-dir",
                                str(data_dir), "--reason", "the consoles' test"],
                               capture_output=True, text=True, timeout=240, check=False)
        assert moved.returncode == 0, moved
        poll(lambda: dr.get("/api/v1/site", headers=auth).json()["acting"], 10, what="the DR console acting")
        page = primary.get("/captures", headers=html, cookies=session)
        assert page.status_code == 303 and page.headers["location"] == f"{dr_url}/captures", page
        assert dr.get("/captures", headers=html, cookies=session).status_code == 200  # the same session goes on
        made = dr.post("/api/v1/users", json={"username": "dr-shift", "password": "a-long-dr-shift-password",
                                              "role": "viewer"}, headers=auth)
        assert made.status_code == 201, made.text
        poll(lambda: "dr-shift" in users_at(primary), 60, what="the DR site's new user back at the primary")
