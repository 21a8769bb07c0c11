"""The supervisor: wires settings, syncs, workers, topic sync and checkpoints, and runs their timers.

Start-up order matters for exactness: the offset-syncs topic is read whole before any worker starts,
so every partition resumes from its target log end through the same syncs that produced it.
"""

from __future__ import annotations

import logging
import threading
import time
import zlib
from collections.abc import Callable, Mapping

from bus.client.admin import AdminClient
from bus.client.errors import ConfigError
from dr_mirror.checkpoints import Checkpointer
from dr_mirror.metrics import MirrorMetrics
from dr_mirror.settings import Settings
from dr_mirror.syncs import TOPIC_CONFIGS, SyncStore
from dr_mirror.topics import TopicSync, create_internal
from dr_mirror.worker import Registry, Worker

log = logging.getLogger(__name__)


class Mirror:
    def __init__(self, settings: Settings, metrics: MirrorMetrics | None = None,
                 stopping: threading.Event | None = None) -> None:
        self.settings = settings
        self.metrics = metrics or MirrorMetrics()
        self.registry = Registry()
        self.stopping = stopping or threading.Event()
        self.workers: list[Worker] = []

    def _admin(self, cluster: Mapping[str, str], name: str) -> AdminClient:
        """An admin client, waiting for the cluster: a mirror started before its clusters keeps trying (settings
        that cannot work, such as a missing trust store, stop it at once)."""
        while True:
            try:
                return AdminClient({**cluster, "client.id": name})
            except ConfigError:
                raise
            except Exception as exc:
                if self.stopping.wait(1.0):
                    raise
                log.info("waiting for %s: %s", cluster["bootstrap.servers"], exc)

    def run(self) -> None:
        s = self.settings
        source = self._admin(s.source_cluster, "dr-mirror-source-admin")
        target = self._admin(s.target_cluster, "dr-mirror-target-admin")
        sync_admin, sync_cluster = (source, s.source_cluster) if s.offset_syncs_location == "source" else (
            target, s.target_cluster)
        create_internal(sync_admin, s.offset_syncs_topic, s.offset_syncs_replication_factor, TOPIC_CONFIGS)
        syncs = SyncStore(sync_cluster, s.offset_syncs_topic, self.metrics)
        known = syncs.load()
        self.workers = [Worker(i, s, self.registry, syncs, known, self.metrics) for i in range(s.tasks)]
        for worker in self.workers:
            worker.start()
        topic_sync = TopicSync(s, source, target, self._assign)
        topic_sync.ensure_internal()
        checkpointer = Checkpointer(s, source, target, self.registry, self.metrics)
        due = {"topics": 0.0, "checkpoints": time.monotonic() + s.emit_checkpoints_interval,
               "groups": time.monotonic() + s.sync_group_offsets_interval}
        try:
            while not self.stopping.is_set():
                for worker in self.workers:
                    if worker.failure is not None:
                        raise RuntimeError(f"{worker.name} failed: {worker.failure}") from worker.failure
                now = time.monotonic()
                self._every(due, "topics", now, s.refresh_topics_interval, topic_sync.run_once)
                if s.emit_checkpoints:
                    self._every(due, "checkpoints", now, s.emit_checkpoints_interval, checkpointer.emit)
                if s.sync_group_offsets:
                    self._every(due, "groups", now, s.sync_group_offsets_interval, checkpointer.sync_group_offsets)
                self.stopping.wait(0.2)
        finally:
            for worker in self.workers:
                worker.stop()
            for worker in self.workers:
                worker.join(10)
            checkpointer.close()
            syncs.close()
            source.close()
            target.close()

    def _every(self, due: dict[str, float], name: str, now: float, interval: float, job: Callable[[], object]) -> None:
        if now < due[name]:
            return
        due[name] = now + interval
        try:
            job()
        except Exception as exc:  # a cluster away for a moment: the next interval tries again
            log.warning("%s sync failed: %s", name, exc)
            due[name] = now + min(interval, 1.0)

    def _assign(self, topic: str, partition: int) -> None:
        """A partition always goes to the same worker (stable across restarts)."""
        index = zlib.crc32(f"{topic}-{partition}".encode()) % len(self.workers)
        self.workers[index].assign(topic, partition)

    def stop(self) -> None:
        self.stopping.set()
