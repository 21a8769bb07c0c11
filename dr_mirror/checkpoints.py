"""Consumer-group offsets: checkpoints on the target and, optionally, the translated offsets committed there.

Every `emit.checkpoints.interval.seconds` each source group matching `groups` / `groups.exclude` has
its committed offsets translated through the exact offset map (`Registry.translate`) and written as
MM2 Checkpoint records to `<source>.checkpoints.internal` on the target, where Kafka's own tooling
(RemoteClusterUtils.translateOffsets) reads them. With `sync.group.offsets.enabled` the translated
offsets are also committed for the group on the target, as MM2 does: only while the group has no
active members there, and only forward.
"""

from __future__ import annotations

import logging
import time

from bus.client.admin import AdminClient, AdminError, OffsetAndMetadata, TopicPartition
from bus.client.producer import KafkaProducer
from dr_mirror.formats import Checkpoint
from dr_mirror.metrics import MirrorMetrics
from dr_mirror.settings import Settings
from dr_mirror.worker import Registry

log = logging.getLogger(__name__)

_INACTIVE = {"empty", "dead", ""}


class Checkpointer:
    def __init__(self, settings: Settings, source: AdminClient, target: AdminClient, registry: Registry,
                 metrics: MirrorMetrics) -> None:
        self.settings = settings
        self.source = source
        self.target = target
        self.registry = registry
        self.metrics = metrics
        self._producer = KafkaProducer({**settings.target_cluster, "acks": "all", "client.id": "dr-mirror-checkpoints"})
        self.last: dict[str, dict[TopicPartition, Checkpoint]] = {}
        self._groups: list[str] = []
        self._groups_due = 0.0

    def groups(self) -> list[str]:
        """Source groups to checkpoint, listed again every `refresh.groups.interval.seconds`."""
        if time.monotonic() >= self._groups_due:
            s = self.settings
            self._groups = [g.group_id for g in self.source.list_consumer_groups() if s.mirrors_group(g.group_id)]
            self._groups_due = time.monotonic() + s.refresh_groups_interval
        return self._groups

    def checkpoints(self) -> dict[str, dict[TopicPartition, Checkpoint]]:
        """Translated offsets of every mirrored group (source topic-partitions, renamed for the target)."""
        s = self.settings
        out: dict[str, dict[TopicPartition, Checkpoint]] = {}
        for group in self.groups():
            try:
                committed = self.source.list_consumer_group_offsets(group)
            except AdminError as exc:
                log.info("cannot read the offsets of group %s: %s", group, exc)
                continue
            for tp, om in committed.items():
                if om.offset < 0:
                    continue
                translated = self.registry.translate(tp.topic, tp.partition, om.offset)
                if translated is None:
                    continue
                out.setdefault(group, {})[TopicPartition(s.target_topic(tp.topic), tp.partition)] = Checkpoint(
                    group, s.target_topic(tp.topic), tp.partition, om.offset, translated, om.metadata or "")
        return out

    def emit(self) -> dict[str, dict[TopicPartition, Checkpoint]]:
        found = self.checkpoints()
        futures = []
        for group, by_tp in found.items():
            for tp, checkpoint in by_tp.items():
                if self.last.get(group, {}).get(tp) != checkpoint:
                    futures.append(self._producer.send(self.settings.checkpoints_topic, key=checkpoint.key(),
                                                       value=checkpoint.value()))
        for future in futures:
            future.get(timeout=60)
        self.metrics.checkpoints.inc(len(futures))
        self.last = found
        return found

    def sync_group_offsets(self) -> None:
        """Commit translated offsets on the target for groups with no active members there, never backwards."""
        for group, by_tp in self.last.items():
            try:
                state = self.target.describe_consumer_groups([group])[group].state
            except AdminError:
                state = "dead"
            if (state or "").lower() not in _INACTIVE:
                continue
            current = self.target.list_consumer_group_offsets(group)
            plan = {tp: OffsetAndMetadata(c.downstream_offset, c.metadata) for tp, c in by_tp.items()
                    if tp not in current or current[tp].offset < c.downstream_offset}
            if plan:
                try:
                    self.target.alter_consumer_group_offsets(group, plan)
                except AdminError as exc:  # the group became active meanwhile: next interval
                    log.info("cannot commit translated offsets of %s on the target: %s", group, exc)

    def close(self) -> None:
        self._producer.close(timeout=5)
