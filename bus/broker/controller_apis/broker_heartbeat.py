"""BrokerHeartbeat (63): a registered broker renews its session with the active controller.

A fenced broker's heartbeat unfences it (a committed record, answered once committed). Broker epochs, metadata
catch-up (`is_caught_up`) and controlled shutdown (`want_shut_down`) are later steps: the answer reports the
broker caught up and never asks it to shut down.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.context import RequestContext
from bus.controller.controller import ControllerError

API_KEY = 63
MIN_VERSION = 0
MAX_VERSION = 1


def handle(ctx: RequestContext, request: Any) -> Any:
    try:
        ctx.controller.broker_heartbeat(request.broker_id)
    except ControllerError as exc:
        return ctx.make("BrokerHeartbeatResponse", throttle_time=0, error_code=exc.code, is_caught_up=False,
                        is_fenced=True, should_shut_down=False)
    return ctx.make("BrokerHeartbeatResponse", throttle_time=0, error_code=ErrorCode.none, is_caught_up=True,
                    is_fenced=False, should_shut_down=False)
