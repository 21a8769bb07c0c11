"""The broker's quorum: a `RaftDriver` built from `server.properties`, or None when the node runs no quorum.

A node runs one when its `process.roles` includes `controller` and `controller.quorum.voters` is set;
without voters it stays the single-node broker it always was (the metadata log is local). The quorum's
files live where Kafka keeps them: `<metadata.log.dir>/__cluster_metadata-0/` (`quorum-state`, and the
log once it is on disk).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from bus.config.broker import BrokerConfig
from bus.controller.metadata_log import METADATA_PARTITION_DIR
from bus.raft.config import QuorumConfig
from bus.raft.driver import RaftDriver
from bus.raft.log import InMemoryRaftLog, RaftLog
from bus.raft.quorum_state import FileQuorumStateStore


def quorum_config(config: BrokerConfig) -> QuorumConfig:
    return QuorumConfig(
        voters=frozenset(config.quorum_voters),
        election_timeout_ms=int(config["controller.quorum.election.timeout.ms"]),
        fetch_timeout_ms=int(config["controller.quorum.fetch.timeout.ms"]),
        election_backoff_max_ms=int(config["controller.quorum.election.backoff.max.ms"]),
        retry_backoff_ms=int(config["controller.quorum.retry.backoff.ms"]),
        request_timeout_ms=int(config["controller.quorum.request.timeout.ms"]),
    )


def in_memory_log(_directory: Path) -> RaftLog:
    """Until the metadata log is on disk (FileRaftLog), it lives in memory: a restarted voter starts empty."""
    return InMemoryRaftLog()


def build_driver(config: BrokerConfig, cluster_id: str,
                 log_factory: Callable[[Path], RaftLog] = in_memory_log) -> RaftDriver | None:
    if "controller" not in config["process.roles"] or not config.quorum_voters:
        return None
    directory = config.metadata_dir / METADATA_PARTITION_DIR
    return RaftDriver(config.node_id, quorum_config(config), config.quorum_voters, log_factory(directory),
                      FileQuorumStateStore(directory), cluster_id)
