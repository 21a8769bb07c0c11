"""One module per Kafka API, named for it (franz-go's kfake layout): find a handler by its API name.

Each module declares `API_KEY`, `MIN_VERSION`, `MAX_VERSION` and `handle(ctx, request)`, and may declare
`response_items(response)`: how many entries a response holds, for APIs whose responses can grow with the
cluster (Metadata for thousands of partitions), so that KafkaApis encodes a large one off the event loop.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

MODULES = (
    "produce",
    "fetch",
    "list_offsets",
    "offset_for_leader_epoch",
    "metadata",
    "api_versions",
    "sasl_handshake",
    "sasl_authenticate",
    "create_topics",
    "delete_topics",
    "delete_records",
    "describe_acls",
    "create_acls",
    "delete_acls",
    "describe_configs",
    "alter_configs",
    "describe_log_dirs",
    "create_partitions",
    "incremental_alter_configs",
    "describe_cluster",
    "find_coordinator",
    "join_group",
    "sync_group",
    "heartbeat",
    "leave_group",
    "offset_commit",
    "offset_fetch",
    "list_groups",
    "describe_groups",
    "delete_groups",
    "offset_delete",
    "init_producer_id",
    "add_partitions_to_txn",
    "add_offsets_to_txn",
    "end_txn",
    "list_transactions",
    "describe_transactions",
    "describe_producers",
    "consumer_group_heartbeat",
    "consumer_group_describe",
    "txn_offset_commit",
    "write_txn_markers",
    "describe_quorum",
    "elect_leaders",
    "alter_partition_reassignments",
    "list_partition_reassignments",
    "describe_user_scram_credentials",
    "alter_user_scram_credentials",
)


@dataclass(frozen=True, slots=True)
class ApiHandler:
    api_key: int
    min_version: int
    max_version: int
    handle: Callable[[Any, Any], Any]
    response_items: Callable[[Any], int] | None = None


def handler_table(package: str, modules: Iterable[str]) -> dict[int, ApiHandler]:
    """The handlers of `package`'s API modules by API key (also the controller listener's table)."""
    table: dict[int, ApiHandler] = {}
    for name in modules:
        module = importlib.import_module(f"{package}.{name}")
        table[module.API_KEY] = ApiHandler(module.API_KEY, module.MIN_VERSION, module.MAX_VERSION, module.handle,
                                           getattr(module, "response_items", None))
    return dict(sorted(table.items()))


@functools.cache
def handlers() -> dict[int, ApiHandler]:
    """Every handler by API key, loaded once (KafkaApis dispatches on it, ApiVersions lists it)."""
    return handler_table(__name__, MODULES)
