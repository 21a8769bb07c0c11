"""The broker's quorum: a `RaftDriver` built from `server.properties`, or None when the node runs no quorum.

A node runs one when its `process.roles` includes `controller` and `controller.quorum.voters` is set;
without voters it stays the single-node broker it always was (the metadata log is local). The quorum's
log (`FileRaftLog`) and `quorum-state` file live in `<metadata.log.dir>/__cluster_metadata-0/raft/` for now:
Kafka keeps them in `__cluster_metadata-0/` itself, but that directory still holds the QuorumController's
own `metadata.log`, which FileRaftLog rightly refuses to share a directory with. When the controller's
records move into the raft log, the raft log takes the partition directory over.
"""

from __future__ import annotations

from bus.config.broker import BrokerConfig
from bus.controller.metadata_log import METADATA_PARTITION_DIR
from bus.raft.config import QuorumConfig
from bus.raft.disk_log import FileRaftLog
from bus.raft.driver import RaftDriver
from bus.raft.quorum_state import FileQuorumStateStore

RAFT_DIR = "raft"


def quorum_config(config: BrokerConfig) -> QuorumConfig:
    return QuorumConfig(
        voters=frozenset(config.quorum_voters),
        election_timeout_ms=int(config["controller.quorum.election.timeout.ms"]),
        fetch_timeout_ms=int(config["controller.quorum.fetch.timeout.ms"]),
        election_backoff_max_ms=int(config["controller.quorum.election.backoff.max.ms"]),
        retry_backoff_ms=int(config["controller.quorum.retry.backoff.ms"]),
        request_timeout_ms=int(config["controller.quorum.request.timeout.ms"]),
    )


def build_driver(config: BrokerConfig, cluster_id: str) -> RaftDriver | None:
    if "controller" not in config["process.roles"] or not config.quorum_voters:
        return None
    directory = config.metadata_dir / METADATA_PARTITION_DIR / RAFT_DIR
    log = FileRaftLog(directory)
    try:
        driver = RaftDriver(config.node_id, quorum_config(config), config.quorum_voters, log,
                            FileQuorumStateStore(directory), cluster_id)
    except BaseException:
        log.close()
        raise
    driver.stop_callbacks.append(log.close)
    return driver
