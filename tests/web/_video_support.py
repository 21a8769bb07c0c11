"""A console for the video tests: its own broker, HBase gateway and object store (SeaweedFS), the video
topics made before it starts (as the video ingest job makes them in a deployment), users of each role,
and helpers to put recordings into the ``videos`` bucket and read what the console published.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from dataclasses import astuple, dataclass
from pathlib import Path
from typing import Any

import happybase
import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from contracts.tables import video as layout
from contracts.topics import Topics
from deploy.object_store import ObjectStore
from deploy.processes.broker import BrokerProcess
from deploy.processes.console import Backing, ConsoleProcess, password_of, start_console
from deploy.processes.gateway import start_gateway
from ingest.city import build_city
from tests.web.conftest import ROLES
from video import storage
from video.scene import street_scene

TOPICS = Topics()


@dataclass
class VideoSite:
    console: ConsoleProcess
    store: ObjectStore
    root: Path

    @property
    def url(self) -> str:
        return self.console.url

    @property
    def bootstrap(self) -> str:
        return self.console.backing.broker.bootstrap

    @property
    def hbase_port(self) -> int:
        return self.console.backing.gateway.port

    def s3(self) -> Any:
        return storage.connect(self.store.url, self.store.access_key, self.store.secret_key)

    def record(self, camera: str, start: dt.datetime, seconds: float = 4, seed: int = 1, fourcc: str = "VP80",
               suffix: str = ".webm", n_objects: int = 3) -> storage.StoredVideo:
        """A synthetic street clip recorded by ``camera`` at ``start``, uploaded as the camera simulator does."""
        path = self.root / f"{camera}-{seed}-{fourcc}{suffix}"
        street_scene(seconds=seconds, n_objects=n_objects, seed=seed).write(path, fourcc=fourcc)
        return storage.upload_video(self.s3(), path, camera, start)


def start_video_site(root: Path, **console: Any) -> Iterator[VideoSite]:
    """Start everything (a generator for module fixtures); stops it all in reverse order."""
    broker = BrokerProcess(root / "broker").start()
    gateway = store = proc = None
    try:
        gateway = start_gateway(root / "hbase", log_dir=root)
        store = ObjectStore(root / "s3", port=0).start()
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        wanted = (TOPICS.video_commands, TOPICS.video_status, TOPICS.video_results, TOPICS.ingest_stats, TOPICS.alerts)
        for future in admin.create_topics([NewTopic(t, 1, 1) for t in wanted]).values():
            future.result(30)
        build_city(7, 12).save(root / "deployment_map.json")
        proc = start_console(Backing(broker, gateway, root), timeout=180,
                             s3=(store.url, *astuple(store.credentials("console"))),
                             **console)
        for role in ROLES:
            result = proc.cli("users", "add", role, "--role", role, stdin=password_of(role) + "\n")
            assert result.returncode == 0, result.stderr
        yield VideoSite(proc, store, root)
    finally:
        if proc is not None:
            proc.stop()
        if store is not None:
            store.stop()
        if gateway is not None:
            gateway.kill()
        broker.stop()


@pytest.fixture(scope="module")
def video_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VideoSite]:
    yield from start_video_site(tmp_path_factory.mktemp("video-console"))


def read_topic(bootstrap: str, topic: str, timeout: float = 20) -> list[tuple[bytes | None, dict[str, Any]]]:
    """Every (key, JSON value) on partition 0 of ``topic`` so far, read with assign() (no group)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "video-console-test",
                         "enable.auto.commit": False})
    try:
        _low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=timeout)
        consumer.assign([TopicPartition(topic, 0, 0)])
        found: list[tuple[bytes | None, dict[str, Any]]] = []
        while len(found) < high:
            message = consumer.poll(timeout)
            assert message is not None, f"only {len(found)} of {high} records of {topic} within {timeout} s"
            assert message.error() is None, message.error()
            found.append((message.key(), json.loads(message.value())))
        return found
    finally:
        consumer.close()


def load_task(video_site: VideoSite, task_id: str, video: storage.StoredVideo, status: str,
          records: list[dict[str, Any]], **fields: Any) -> None:
    """Rows as the video ingest job's loader writes them."""
    connection = happybase.Connection("127.0.0.1", video_site.hbase_port)
    try:
        layout.ensure_video_tables(connection)
        requested = "2024-05-02T09:00:00.000+08:00"
        connection.table(layout.TASK_LIST_TABLE).put(layout.task_list_key(requested, task_id),
                                                     layout.task_list_row(task_id, video.camera_id, video.url,
                                                                          requested))
        connection.table(layout.TASK_TABLE).put(layout.task_row_key(task_id), layout.task_row(
            task_id, status, video_url=video.url, camera_id=video.camera_id, requested_by="operator",
            requested_at=requested, **fields))
        for record in records:
            connection.table(layout.OBJECT_TABLE).put(layout.object_row_key(task_id, record["object_id"]),
                                                      layout.object_row(record))
            connection.table(layout.INDEX_TABLE).put(layout.index_row_key(record), layout.object_row(record))
    finally:
        connection.close()
