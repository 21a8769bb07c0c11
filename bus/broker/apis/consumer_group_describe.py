"""ConsumerGroupDescribe (69): KIP-848 groups with their epochs, members, assignments and targets.

Each group needs DESCRIBE (GROUP_AUTHORIZATION_FAILED otherwise); asked for, a described group carries the operations
the principal may do on it.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.apis._common import OPERATIONS_NOT_REQUESTED
from bus.broker.context import RequestContext
from bus.coordinator.group.consumer.assignors import Assignment
from bus.security.acls import AclOperation, ResourceType

API_KEY = 69
MIN_VERSION = 0
MAX_VERSION = 1


def _assignment(ctx: RequestContext, assignment: Assignment) -> Any:
    coordinator = ctx.consumer_groups
    return ctx.make("Assignment", topic_partitions=[
        ctx.make("TopicPartitions", topic_id=tid, topic_name=coordinator.topic_name(tid), partitions=sorted(parts))
        for tid, parts in sorted(assignment.items(), key=lambda item: str(item[0]))
    ])


def _operations(ctx: RequestContext, request: Any, group_id: str) -> int:
    if not request.include_authorized_operations:
        return OPERATIONS_NOT_REQUESTED
    return ctx.authorized_operations(ResourceType.GROUP, group_id)


def handle(ctx: RequestContext, request: Any) -> Any:
    coordinator = ctx.consumer_groups
    described = []
    for group_id in request.group_ids:
        if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            described.append(ctx.make("DescribedGroup", error_code=ErrorCode.group_authorization_failed,
                                      error_message=None, group_id=group_id, group_state="", members=(),
                                      authorized_operations=OPERATIONS_NOT_REQUESTED))
            continue
        group = coordinator.describe(group_id)
        if group is None:
            described.append(ctx.make("DescribedGroup", error_code=ErrorCode.group_id_not_found,
                                      error_message=f"Group {group_id} not found.", group_id=group_id,
                                      group_state="Dead", members=(), authorized_operations=OPERATIONS_NOT_REQUESTED))
            continue
        members = [
            ctx.make("Member", member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id,
                     member_epoch=m.member_epoch, client_id=m.client_id, client_host=m.client_host,
                     subscribed_topic_names=m.subscribed_topics, subscribed_topic_regex=m.subscribed_regex,
                     assignment=_assignment(ctx, m.assigned),
                     target_assignment=_assignment(ctx, group.target.get(m.member_id, {})), member_type=1)
            for m in group.members.values()
        ]
        described.append(ctx.make("DescribedGroup", error_code=ErrorCode.none, group_id=group_id,
                                  group_state=group.state, group_epoch=group.group_epoch,
                                  assignment_epoch=group.assignment_epoch, assignor_name=group.assignor,
                                  members=members, authorized_operations=_operations(ctx, request, group_id)))
    return ctx.make("ConsumerGroupDescribeResponse", throttle_time=0, groups=described)
