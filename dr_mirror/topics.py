"""Topic sync: matching source topics exist on the target with the same partition count and configs.

Run every `refresh.topics.interval.seconds` by the supervisor: creates missing target topics (a new
mirror therefore starts every existing topic from its beginning, as MM2 does), grows partition counts,
copies the topic configs the source set explicitly (minus MM2's DefaultConfigPropertyFilter
exclusions) every `sync.topic.configs.interval.seconds`, and hands each partition to a worker once
its target exists. A topic deleted on the source stays on the target unless
`sync.topic.deletions.enabled=true`.

A target without CreateTopics (librdkafka's mock cluster) is tolerated: its auto-created topics are
used as they come, and a partition the target lacks waits.
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections.abc import Callable

from bus.client.admin import (
    AdminClient,
    AdminError,
    AlterConfigOp,
    ConfigResource,
    ConfigResourceType,
    ConfigSource,
    NewPartitions,
    NewTopic,
    TopicAlreadyExistsError,
)
from bus.client.cluster import Metadata
from bus.client.connection import UnsupportedVersionError
from bus.client.errors import KafkaError
from bus.client.security import client_security
from dr_mirror.settings import Settings

log = logging.getLogger(__name__)

# MM2's DefaultConfigPropertyFilter: configs that describe the cluster, not the data.
EXCLUDED_CONFIGS = (r"follower\.replication\.throttled\.replicas", r"leader\.replication\.throttled\.replicas",
                    r"message\.timestamp\.difference\.max\.ms", r"message\.timestamp\.type",
                    r"unclean\.leader\.election\.enable", r"min\.insync\.replicas")


def _copied(name: str) -> bool:
    return not any(re.fullmatch(p, name) for p in EXCLUDED_CONFIGS)


class TopicSync:
    def __init__(self, settings: Settings, source: AdminClient, target: AdminClient,
                 assign: Callable[[str, int], None]) -> None:
        self.settings = settings
        self.source = source
        self.target = target
        self.assign = assign
        self.assigned: set[tuple[str, int]] = set()
        self.mirrored: set[str] = set()
        self._configs_due = 0.0
        self._can_create = True

    def ensure_internal(self) -> None:
        """The checkpoints topic on the target, compacted as MM2 makes it (the offset-syncs topic is made
        by the supervisor where `offset-syncs.topic.location` says)."""
        s = self.settings
        create_internal(self.target, s.checkpoints_topic, s.checkpoints_replication_factor,
                        {"cleanup.policy": "compact"})

    def run_once(self) -> None:
        s = self.settings
        names = [t for t in self.source.list_topics() if s.mirrors_topic(t)]
        described = self.source.describe_topics(names) if names else {}
        counts = {name: len(d.partitions) for name, d in described.items()}
        target_names = set(self.target.list_topics())
        wanted = {s.target_topic(n): n for n in counts}
        existing = {t: len(d.partitions) for t, d in self.target.describe_topics(
            [t for t in wanted if t in target_names]).items()} if target_names & wanted.keys() else {}
        configs = self._source_configs(counts) if (time.monotonic() >= self._configs_due or
                                                   wanted.keys() - existing.keys()) else None
        for target_name, source_name in wanted.items():
            count = counts[source_name]
            if target_name not in existing:
                existing[target_name] = self._create(target_name, count, (configs or {}).get(source_name, {}))
            elif existing[target_name] < count:
                self._grow(target_name, count)
                existing[target_name] = count
            for partition in range(min(count, existing[target_name])):
                if (source_name, partition) not in self.assigned:
                    self.assigned.add((source_name, partition))
                    self.assign(source_name, partition)
        if configs is not None and s.sync_topic_configs:
            self._sync_configs(configs, existing)
            self._configs_due = time.monotonic() + s.sync_topic_configs_interval
        gone = self.mirrored - set(counts)
        if gone and s.delete_topics:
            targets = [s.target_topic(n) for n in gone if s.target_topic(n) in target_names]
            if targets:
                log.warning("deleting %s on the target: deleted on the source", ", ".join(targets))
                self.target.delete_topics(targets, raise_on_error=False)
        self.mirrored = set(counts)

    def _source_configs(self, counts: dict[str, int]) -> dict[str, dict[str, str]]:
        if not counts:
            return {}
        resources = [ConfigResource(ConfigResourceType.TOPIC, n) for n in counts]
        described = self.source.describe_configs(resources)
        return {r.name: {k: e.value for k, e in entries.items()
                         if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG and e.value is not None and _copied(k)}
                for r, entries in described.items()}

    def _create(self, name: str, partitions: int, configs: dict[str, str]) -> int:
        if self._can_create:
            try:
                self.target.create_topics([NewTopic(name, partitions, self.settings.replication_factor, None,
                                                    configs)])
                log.info("created %s on the target: %s partitions, configs %s", name, partitions, configs)
                return partitions
            except TopicAlreadyExistsError:
                pass
            except UnsupportedVersionError:
                log.warning("the target does not serve CreateTopics: relying on its auto-creation")
                self._can_create = False
        return self._auto_create(name)

    def _auto_create(self, name: str) -> int:
        """Ask for the topic's metadata with allow_auto_topic_creation, as a producer would."""
        s = self.settings
        metadata = Metadata([s.target_bootstrap], client_id="dr-mirror-topics", request_timeout_ms=10_000,
                            retry_backoff_ms=200, metadata_max_age_ms=30_000, allow_auto_create=True,
                            security=client_security(s.target_cluster))
        try:
            count = len(metadata.wait_for_topic(name, time.monotonic() + 10).partitions)
        except (KafkaError, OSError) as exc:
            log.warning("%s is not on the target and cannot be created there: %s", name, exc)
            return 0
        finally:
            metadata.close()
        log.info("%s was auto-created on the target with %s partitions", name, count)
        return count

    def _grow(self, name: str, count: int) -> None:
        try:
            self.target.create_partitions({name: NewPartitions(count)})
            log.info("grew %s on the target to %s partitions", name, count)
        except (AdminError, UnsupportedVersionError) as exc:
            log.warning("cannot grow %s on the target to %s partitions: %s", name, count, exc)

    def _sync_configs(self, configs: dict[str, dict[str, str]], existing: dict[str, int]) -> None:
        s = self.settings
        names = [n for n in configs if s.target_topic(n) in existing]
        if not names:
            return
        try:
            current = self.target.describe_configs(
                [ConfigResource(ConfigResourceType.TOPIC, s.target_topic(n)) for n in names])
        except (AdminError, UnsupportedVersionError) as exc:
            log.info("cannot read target topic configs: %s", exc)
            return
        changes = {}
        for name in names:
            resource = ConfigResource(ConfigResourceType.TOPIC, s.target_topic(name))
            have = {k: e.value for k, e in current.get(resource, {}).items()}
            ops = [AlterConfigOp.set(k, v) for k, v in configs[name].items() if have.get(k) != v]
            if ops:
                changes[resource] = ops
        if changes:
            log.info("syncing topic configs: %s", {r.name: [o.name for o in ops] for r, ops in changes.items()})
            self.target.incremental_alter_configs(changes, raise_on_error=False)


def create_internal(admin: AdminClient, name: str, replication_factor: int, configs: dict[str, str]) -> None:
    """A one-partition internal topic, unless it exists (or the cluster cannot create topics)."""
    with contextlib.suppress(TopicAlreadyExistsError, UnsupportedVersionError):
        admin.create_topics([NewTopic(name, 1, replication_factor, None, configs)])
