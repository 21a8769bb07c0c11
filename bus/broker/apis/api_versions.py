"""ApiVersions (18): what we serve, which clients use to pick versions and to guess the broker release.

Produce is advertised from v0 although only v3+ (magic v2 batches) is accepted: librdkafka turns
compression off when Produce v0 is not advertised (KAFKA-18659), exactly as Kafka 4.0 does.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.apis import handlers
from bus.broker.context import RequestContext
from bus.protocol.messages import Shapes

API_KEY = 18
MIN_VERSION = 0
MAX_VERSION = 4

ADVERTISED_MIN = {0: 0}  # api key -> advertised min version when lower than the handler's


def api_versions_response(handlers: dict[int, Any], shapes: Shapes, error: ErrorCode) -> Any:
    keys = [
        shapes.make(
            "ApiVersion",
            api_key=h.api_key,
            min_version=ADVERTISED_MIN.get(h.api_key, h.min_version),
            max_version=h.max_version,
        )
        for h in handlers.values()
    ]
    return shapes.make("ApiVersionsResponse", error_code=error, api_keys=keys, throttle_time=0,
                       finalized_features_epoch=-1)


def handle(ctx: RequestContext, request: Any) -> Any:
    return api_versions_response(handlers(), ctx.shapes, ErrorCode.none)
