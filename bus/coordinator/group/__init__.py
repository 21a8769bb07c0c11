"""The classic consumer group coordinator: membership, rebalances and committed offsets.

Modelled on Kafka's GroupCoordinator (`member.py` ~ MemberMetadata, `group.py` ~ GroupMetadata,
`coordinator.py` ~ GroupCoordinator, `records.py` + `offset_store.py` ~ GroupMetadataManager).
"""

from bus.coordinator.group.coordinator import GroupCoordinator

__all__ = ["GroupCoordinator"]
