"""The group coordinator: classic groups, KIP-848 consumer groups, and the committed offsets of both.

Modelled on Kafka's group coordinator: `namespace.py` ~ GroupMetadataManager's map of groups (one namespace for
both kinds), `classic/` the classic protocol (`member.py` ~ MemberMetadata, `group.py` ~ GroupMetadata,
`rebalance.py` + `protocol.py` ~ GroupCoordinator's join/sync/heartbeat/leave), `consumer/` the KIP-848 protocol,
`coordinator.py` ~ the GroupCoordinator service (offsets, loading, admin), `offsets.py` ~ OffsetMetadataManager,
`records.py` + `offset_store.py` + `loader.py` ~ the `__consumer_offsets` formats, writes and replay.
"""

from bus.coordinator.group.coordinator import GroupCoordinator
from bus.coordinator.group.namespace import GroupNamespace

__all__ = ["GroupCoordinator", "GroupNamespace"]
