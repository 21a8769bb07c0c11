"""ApiVersions (18) on the controller listener: exactly the KRaft RPCs it serves, so a peer negotiates them."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.apis.api_versions import MAX_VERSION, MIN_VERSION, api_versions_response
from bus.broker.context import RequestContext
from bus.broker.controller_apis import handlers

API_KEY = 18
__all__ = ["API_KEY", "MAX_VERSION", "MIN_VERSION", "handle"]


def handle(ctx: RequestContext, request: Any) -> Any:
    return api_versions_response(handlers(), ctx.shapes, ErrorCode.none)
