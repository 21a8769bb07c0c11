"""`meta.properties`: which node and cluster own a log dir, as `kafka-storage format` (`bus storage format`) writes
it and as every start checks it."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from bus.config.definitions import ConfigError
from bus.config.properties import load_properties

META_PROPERTIES = "meta.properties"


def check_meta_properties(directory: Path, node_id: int, cluster_id: str) -> None:
    """Each log dir records which node and cluster own it (`meta.properties`), as `kafka-storage format` does.

    Pointing a node at another node's or cluster's data is refused rather than silently mixed; a dir without the
    file gets one.
    """
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / META_PROPERTIES
    if path.exists():
        props = load_properties(path)
        if props.get("node.id") != str(node_id):
            raise ConfigError(
                f"Stored node id {props.get('node.id')} in {path} doesn't match the configured node.id {node_id}"
            )
        if props.get("cluster.id") != cluster_id:
            raise ConfigError(
                f"Invalid cluster.id in {path}: expected {cluster_id} but read {props.get('cluster.id')}"
            )
        return
    directory_id = uuid.uuid4()
    path.write_text(
        f"#\n#{time.strftime('%a %b %d %H:%M:%S %Z %Y')}\ncluster.id={cluster_id}\n"
        f"directory.id={directory_id}\nnode.id={node_id}\nversion=1\n"
    )
