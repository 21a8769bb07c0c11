"""FindCoordinator (10): which broker coordinates a group (key type 0) or a transactional id (1).

v0-v3 ask about one key; v4+ batch them in `coordinator_keys` and answer one entry each. A group's
coordinator is the leader of its `__consumer_offsets` partition, a transactional id's the leader of its
`__transaction_state` partition (Kafka's hash of the key modulo the partition count). When that is this
broker, it answers once the partition is loaded; in a cluster, another broker's endpoint on the listener
asked on (CoordinatorNotAvailable while that broker is fenced or unknown).

A group key needs DESCRIBE on the group (GROUP_AUTHORIZATION_FAILED), a transactional id DESCRIBE on it
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED), as Kafka checks before it looks the coordinator up.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.apis._common import BrokerEndpoint, live_brokers
from bus.broker.context import RequestContext
from bus.coordinator.group.offset_store import OFFSETS_TOPIC
from bus.coordinator.partitioning import partition_for
from bus.coordinator.transaction.coordinator import TOPIC as TRANSACTIONS_TOPIC
from bus.protocol.error_response import ERROR_MESSAGES
from bus.security.acls import AclOperation, ResourceType

API_KEY = 10
MIN_VERSION = 0
MAX_VERSION = 6

KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1
BATCHED_VERSION = 4


_UNAVAILABLE = "The coordinator is not available."
# What a key of each type must be describable as, and the error when it is not.
_ACCESS = {KEY_TYPE_GROUP: (ResourceType.GROUP, ErrorCode.group_authorization_failed),
           KEY_TYPE_TRANSACTION: (ResourceType.TRANSACTIONAL_ID, ErrorCode.transactional_id_authorization_failed)}
_NOBODY = BrokerEndpoint(-1, "", -1, None)


def _leader_of(ctx: RequestContext, topic: str, key: str) -> int | None:
    """The broker leading `key`'s partition of `topic`, None while the topic does not exist yet."""
    image = ctx.metadata.topics.get(topic)
    if image is None or not image.partitions:
        return None
    state = image.partitions.get(partition_for(key, len(image.partitions)))
    return None if state is None else state.leader


def _lookup(ctx: RequestContext, key_type: int, key: str,
            brokers: list[BrokerEndpoint]) -> tuple[ErrorCode, str | None, BrokerEndpoint]:
    if key_type not in (KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION):
        return ErrorCode.invalid_request, f"Invalid coordinator type: {key_type}", _NOBODY
    resource_type, refusal = _ACCESS[key_type]
    if not ctx.authorize(AclOperation.DESCRIBE, resource_type, key):
        return refusal, ERROR_MESSAGES[refusal], _NOBODY
    leader = _leader_of(ctx, OFFSETS_TOPIC if key_type == KEY_TYPE_GROUP else TRANSACTIONS_TOPIC, key)
    if leader is not None and leader != ctx.node_id:
        remote = next((b for b in brokers if b.node_id == leader), None)
        if remote is None:  # fenced, or not registered yet
            return ErrorCode.coordinator_not_available, _UNAVAILABLE, _NOBODY
        return ErrorCode.none, None, remote
    me = brokers[0]  # live_brokers lists this broker first
    if key_type == KEY_TYPE_GROUP:
        error = ctx.groups.coordinator_error(key)
    else:  # while its partition loads (or before its election reached the coordinator), not yet
        error = None if ctx.transactions.coordinator_error(key) is None else ErrorCode.coordinator_not_available
    return (ErrorCode.none, None, me) if error is None else (error, _UNAVAILABLE, _NOBODY)


def handle(ctx: RequestContext, request: Any) -> Any:
    brokers = live_brokers(ctx)
    key_type = getattr(request, "key_type", KEY_TYPE_GROUP)
    if ctx.api_version < BATCHED_VERSION:
        code, message, at = _lookup(ctx, key_type, request.key, brokers)
        return ctx.make("FindCoordinatorResponse", throttle_time=0, error_code=code, error_message=message,
                        node_id=at.node_id, host=at.host, port=at.port)
    coordinators = []
    for key in request.coordinator_keys:
        code, message, at = _lookup(ctx, key_type, key, brokers)
        coordinators.append(ctx.make("Coordinator", key=key, node_id=at.node_id, host=at.host, port=at.port,
                                     error_code=code, error_message=message))
    return ctx.make("FindCoordinatorResponse", throttle_time=0, coordinators=coordinators)
