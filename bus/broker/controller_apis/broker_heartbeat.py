"""BrokerHeartbeat (63): a registered broker renews its session with the active controller.

A fenced broker's heartbeat unfences it (a committed record, answered once committed). `want_shut_down` is
controlled shutdown: the controller moves the broker's leaderships and ISR memberships to other brokers and answers
`should_shut_down` once it leads nothing (fencing it then), so a broker stopping on SIGTERM leaves no partition
without a leader that another in-sync replica could take. Broker epochs and metadata catch-up (`is_caught_up`) are
later steps: the answer reports the broker caught up. Only brokers send it: it needs CLUSTER_ACTION on the cluster
(CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.context import RequestContext
from bus.controller.controller import ControllerError
from bus.security.acls import AclOperation

API_KEY = 63
MIN_VERSION = 0
MAX_VERSION = 1


def handle(ctx: RequestContext, request: Any) -> Any:
    if not ctx.authorize_cluster(AclOperation.CLUSTER_ACTION):
        return ctx.error_response(request, ErrorCode.cluster_authorization_failed)
    try:
        shut_down = ctx.controller.broker_heartbeat(request.broker_id, request.want_shut_down)
    except ControllerError as exc:
        return ctx.make("BrokerHeartbeatResponse", throttle_time=0, error_code=exc.code, is_caught_up=False,
                        is_fenced=True, should_shut_down=False)
    return ctx.make("BrokerHeartbeatResponse", throttle_time=0, error_code=ErrorCode.none, is_caught_up=True,
                    is_fenced=shut_down, should_shut_down=shut_down)
