"""Classic consumer groups (JoinGroup, SyncGroup, Heartbeat, LeaveGroup): the group model and its protocol.

`member.py` ~ Kafka's MemberMetadata, `group.py` ~ GroupMetadata (the state machine), `rebalance.py` the timers
and rebalance steps (Kafka's purgatories), `protocol.py` the four requests (Kafka's GroupCoordinator's classic
half). The groups themselves live in the shared `GroupNamespace`.
"""
