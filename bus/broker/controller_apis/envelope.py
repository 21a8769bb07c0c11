"""Envelope (58): an admin request another node forwarded to this node as the active controller (KIP-590).

The inner frame runs on this node's client APIs as if the client had sent it here, and its response frame goes
back inside the envelope. A node that is not the active controller refuses the envelope with NOT_CONTROLLER
(the forwarding node retries, then answers its client NOT_CONTROLLER) rather than forward it again. Only the
forwardable admin APIs are accepted inside an envelope (anything else is INVALID_REQUEST, as in Kafka).
"""

from __future__ import annotations

import inspect
from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.context import RequestContext
from bus.broker.controller_channel import FORWARDED_APIS
from bus.protocol import header as hdr

API_KEY = 58
MIN_VERSION = MAX_VERSION = 0


async def handle(ctx: RequestContext, request: Any) -> Any:
    channel = ctx.services.controller_channel
    if channel is None or channel.local_apis is None or not ctx.controller.active:
        return ctx.make("EnvelopeResponse", response_data=None, error_code=ErrorCode.not_controller)
    try:
        api_key, _version, _correlation = hdr.peek_api(request.request_data)
    except hdr.HeaderError:
        api_key = -1
    if api_key not in FORWARDED_APIS:
        return ctx.make("EnvelopeResponse", response_data=None, error_code=ErrorCode.invalid_request)
    clients = ctx.config.advertised_client_listeners  # none on a controller-only node: it runs it as it came
    listener = clients[0].name if clients else ctx.listener
    result = channel.local_apis.handle(request.request_data, listener, f"envelope from {ctx.peer}")
    if inspect.isawaitable(result):
        result = await result
    if result is None:  # only acks=0 produce answers nothing, and Produce is never forwarded
        return ctx.make("EnvelopeResponse", response_data=None, error_code=ErrorCode.invalid_request)
    return ctx.make("EnvelopeResponse", response_data=bytes(result)[4:], error_code=ErrorCode.none)
