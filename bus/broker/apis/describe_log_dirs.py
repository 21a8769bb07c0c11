"""DescribeLogDirs (35): which log directory holds each hosted partition, and how big it is.

Every configured directory is listed, even an empty one, so operators see all their disks and
their free space (v4). There is one replica per partition and no inter-directory move, so the
lag is always 0 and no partition is a "future" replica. Needs DESCRIBE on the cluster: without it the answer lists
no directory, with CLUSTER_AUTHORIZATION_FAILED from v3 (older versions have no error code), as Kafka answers.
"""

from __future__ import annotations

import shutil
from collections import defaultdict
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.context import RequestContext
from bus.broker.partition import Partition
from bus.security.acls import AclOperation

API_KEY = 35
MIN_VERSION = 1
MAX_VERSION = 4


def _wanted(request: Any) -> dict[str, set[int]] | None:
    """topic -> partitions asked for, or None for everything (a null topic list)."""
    if request.topics is None:
        return None
    wanted: dict[str, set[int]] = defaultdict(set)
    for topic in request.topics:
        wanted[topic.topic].update(topic.partitions)
    return wanted


def _by_dir(ctx: RequestContext, wanted: dict[str, set[int]] | None) -> dict[Path, dict[str, list[Partition]]]:
    found: dict[Path, dict[str, list[Partition]]] = defaultdict(lambda: defaultdict(list))
    for partition in ctx.replicas.partitions.values():
        if wanted is not None and partition.index not in wanted.get(partition.topic, ()):
            continue
        found[partition.log.directory.parent.resolve()][partition.topic].append(partition)
    return found


def _dir_result(ctx: RequestContext, directory: Path, topics: dict[str, list[Partition]]) -> Any:
    try:
        usage = shutil.disk_usage(directory)
        total, usable = usage.total, usage.free
    except OSError:
        total = usable = -1
    return ctx.make(
        "DescribeLogDirsResult",
        error_code=ErrorCode.none,
        log_dir=str(directory),
        topics=[
            ctx.make(
                "DescribeLogDirsTopic",
                name=name,
                partitions=[
                    ctx.make("DescribeLogDirsPartition", partition_index=p.index, partition_size=p.log.size_bytes,
                             offset_lag=0, is_future_key=False)
                    for p in sorted(partitions, key=lambda p: p.index)
                ],
            )
            for name, partitions in sorted(topics.items())
        ],
        total_bytes=total,
        usable_bytes=usable,
    )


def handle(ctx: RequestContext, request: Any) -> Any:
    if not ctx.authorize_cluster(AclOperation.DESCRIBE):
        return ctx.make("DescribeLogDirsResponse", throttle_time=0, error_code=ErrorCode.cluster_authorization_failed,
                        results=())
    found = _by_dir(ctx, _wanted(request))
    directories = [Path(d).resolve() for d in ctx.config.log_dirs]
    directories += [d for d in found if d not in directories]  # cannot happen, but never hide data
    results = [_dir_result(ctx, d, found.get(d, {})) for d in directories]
    return ctx.make("DescribeLogDirsResponse", throttle_time=0, error_code=ErrorCode.none, results=results)
