"""The broker's quorum: a `RaftDriver` built from `server.properties`, or None when the node runs no quorum, and
the metadata log the controller writes through, decided here for the whole broker (`metadata_log`).

A node runs one when `controller.quorum.voters` is set; then the quorum's log IS the metadata log
(`RaftMetadataLog`). A controller (`process.roles` with `controller`) is one of the voters; a broker-only node is
an observer: it fetches the log from the leader, never votes, and keeps its metadata image from it (Kafka's
broker-only KRaft node). Without voters a combined node stays the single-node broker it always was (the local
`MetadataLog`); the other roles require voters (`load_broker_config` says so).

The quorum's log (`FileRaftLog`) and `quorum-state` file live in `<metadata.log.dir>/__cluster_metadata-0/raft/`:
Kafka keeps them in `__cluster_metadata-0/` itself, but that
directory may still hold a `metadata.log` written before the quorum carried the metadata (imported once, see
`import_local_log`), which FileRaftLog rightly refuses to share a directory with.

Cluster id: every node of a cluster must share it, as `kafka-storage format --cluster-id` gives it to each node's
storage. Unless the node is a lone combined voter (`takes_metadata`) `cluster.id` is required; the first active
controller commits it as the log's cluster record. A lone combined voter keeps the id its storage has (or makes
one), as a single node always did.
"""

from __future__ import annotations

import logging
import os

from bus.config.broker import BrokerConfig
from bus.config.definitions import ConfigError
from bus.config.properties import load_properties
from bus.controller.controller import QuorumController
from bus.controller.metadata_log.local_file import METADATA_PARTITION_DIR, MetadataLog
from bus.controller.metadata_log.quorum import RaftMetadataLog
from bus.controller.metadata_log.record_log import MetadataRecordLog
from bus.controller.snapshot_generator import SnapshotPolicy
from bus.network.node_security import NodeSecurity
from bus.raft.config import QuorumConfig
from bus.raft.driver import RaftDriver
from bus.raft.file_raft_log import FileRaftLog
from bus.raft.quorum_state import FileQuorumStateStore, QuorumStateError

log = logging.getLogger(__name__)

RAFT_DIR = "raft"
IMPORTED_SUFFIX = ".imported"


def quorum_config(config: BrokerConfig) -> QuorumConfig:
    return QuorumConfig(
        voters=frozenset(config.quorum_voters),
        election_timeout_ms=int(config["controller.quorum.election.timeout.ms"]),
        fetch_timeout_ms=int(config["controller.quorum.fetch.timeout.ms"]),
        election_backoff_max_ms=int(config["controller.quorum.election.backoff.max.ms"]),
        retry_backoff_ms=int(config["controller.quorum.retry.backoff.ms"]),
        request_timeout_ms=int(config["controller.quorum.request.timeout.ms"]),
    )


def runs_quorum(config: BrokerConfig) -> bool:
    return bool(config.quorum_voters)


def takes_metadata(config: BrokerConfig) -> bool:
    """Whether the node's metadata is made by other nodes after it starts (a cluster): every node of a quorum but a
    lone combined voter, which is its own active controller and has its whole metadata at once."""
    return runs_quorum(config) and not (config.is_broker and config.is_voter and len(config.quorum_voters) == 1)


def quorum_cluster_id(config: BrokerConfig) -> str:
    """The cluster id a node of a quorum starts with (see the module docstring)."""
    configured = config.values.get("cluster.id")
    if takes_metadata(config):
        if not configured:
            raise ConfigError(
                "cluster.id is required when controller.quorum.voters names more than one voter, or on a broker-only "
                "or controller-only node: every node of a cluster must share one id (as `kafka-storage format "
                "--cluster-id` gives it to each node)")
        return str(configured)
    stored = config.metadata_dir / "meta.properties"
    if not configured and stored.exists():
        existing = load_properties(stored).get("cluster.id")
        if existing:
            return existing
    return config.new_cluster_id()


def build_driver(config: BrokerConfig, cluster_id: str, security: NodeSecurity) -> RaftDriver | None:
    """The node's KRaft driver; `security`: how it reaches the other voters' controller listener."""
    if not runs_quorum(config):
        return None
    directory = config.metadata_dir / METADATA_PARTITION_DIR / RAFT_DIR
    raft_log = FileRaftLog(directory, retention_bytes=int(config["metadata.max.retention.bytes"]),
                           retention_ms=int(config["metadata.max.retention.ms"]))  # fmt: skip
    try:
        driver = RaftDriver(config.node_id, quorum_config(config), config.quorum_voters, raft_log,
                            FileQuorumStateStore(directory), cluster_id, security=security)
    except QuorumStateError as exc:  # e.g. the voters changed under a node's stored election state
        raft_log.close()
        raise ConfigError(f"{directory}: {exc}") from None
    except BaseException:
        raft_log.close()
        raise
    driver.stop_callbacks.append(raft_log.close)
    return driver


def metadata_log(config: BrokerConfig, driver: RaftDriver | None) -> MetadataRecordLog:
    """The log the controller writes through: the quorum's when the node runs one, else its own file."""
    if driver is None:
        return MetadataLog(config.metadata_dir)
    policy = SnapshotPolicy(int(config["metadata.log.max.record.bytes.between.snapshots"]),
                            int(config["metadata.log.max.snapshot.interval.ms"]))
    return RaftMetadataLog(driver, close_log=getattr(driver.node.log, "close", None), snapshot_policy=policy)


def import_local_log(config: BrokerConfig, controller: QuorumController) -> None:
    """A lone voter whose metadata was kept in the local `metadata.log` (before the quorum carried it) commits
    those records to the quorum's log once, then renames the file, so no topic is forgotten on upgrade."""
    path = config.metadata_dir / METADATA_PARTITION_DIR / "metadata.log"
    if not path.exists() or len(config.quorum_voters) != 1 or controller.image.offset or not controller.active:
        return
    local = MetadataLog(config.metadata_dir)
    try:
        records = list(local.records)
    finally:
        local.close()
    if records:
        controller.import_records(records)
    os.replace(path, path.with_name(path.name + IMPORTED_SUFFIX))
    log.info("imported %d metadata records from %s into the quorum's log", len(records), path)
