"""Envelope (58): an admin request another node forwarded to this node as the active controller (KIP-590).

The sender must have CLUSTER_ACTION on the cluster (it is a broker; CLUSTER_AUTHORIZATION_FAILED otherwise). The
inner frame then runs on this node's client APIs as if the client had sent it here, as the client's principal and
from the client's address, both carried in the envelope, so the controller authorizes the client, not the broker
that forwarded it (a principal that cannot be read: PRINCIPAL_DESERIALIZATION_FAILURE). Its response frame goes back
inside the envelope. A node that is not the active controller refuses the envelope with NOT_CONTROLLER (the
forwarding node retries, then answers its client NOT_CONTROLLER) rather than forward it again. Only the forwardable
admin APIs are accepted inside an envelope (anything else is INVALID_REQUEST, as in Kafka).
"""

from __future__ import annotations

import inspect
import ipaddress
from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.context import RequestContext
from bus.controller.controller_channel import FORWARDED_APIS
from bus.protocol import header as hdr
from bus.security.acls import AclOperation, deserialize_principal

API_KEY = 58
MIN_VERSION = MAX_VERSION = 0


def _refused(ctx: RequestContext, code: ErrorCode) -> Any:
    return ctx.make("EnvelopeResponse", response_data=None, error_code=code)


def _client_host(address: bytes) -> str:
    """The client's address as the envelope carries it (4 or 16 bytes; none for a request this node made itself)."""
    return str(ipaddress.ip_address(address)) if address else ""


async def handle(ctx: RequestContext, request: Any) -> Any:
    if not ctx.authorize_cluster(AclOperation.CLUSTER_ACTION):
        return _refused(ctx, ErrorCode.cluster_authorization_failed)
    apis = ctx.services.envelope_apis
    if ctx.services.controller_channel is None or apis is None or not ctx.controller.active:
        return _refused(ctx, ErrorCode.not_controller)
    try:
        api_key, _version, _correlation = hdr.peek_api(request.request_data)
        client_host = _client_host(request.client_host_address)
    except (hdr.HeaderError, ValueError):
        return _refused(ctx, ErrorCode.invalid_request)
    if api_key not in FORWARDED_APIS:
        return _refused(ctx, ErrorCode.invalid_request)
    try:
        principal = deserialize_principal(request.request_principal or b"")
    except ValueError:
        return _refused(ctx, ErrorCode.principal_deserialization_failure)
    clients = ctx.config.advertised_client_listeners  # none on a controller-only node: it runs it as it came
    listener = clients[0].name if clients else ctx.listener
    result = apis.handle(request.request_data, listener, f"envelope from {ctx.peer}", principal=principal,
                         client_host=client_host)
    if inspect.isawaitable(result):
        result = await result
    if result is None:  # only acks=0 produce answers nothing, and Produce is never forwarded
        return _refused(ctx, ErrorCode.invalid_request)
    return ctx.make("EnvelopeResponse", response_data=bytes(result)[4:], error_code=ErrorCode.none)
