"""Request dispatch (Kafka's KafkaApis): frame -> header -> handler -> response frame.

Handlers live one per API in `bus.broker.apis`; each declares its key and version range and
returns a response dataclass, `None` (acks=0 produce) or an awaitable of either, so that only
requests that must wait (long-poll fetch) pay for a task.
"""

from __future__ import annotations

import inspect
import logging
import struct
from collections.abc import Awaitable
from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.apis import ApiHandler, handlers
from bus.broker.context import BrokerServices, RequestContext
from bus.broker.errors import InvalidRequest
from bus.protocol import header as hdr
from bus.protocol import messages

log = logging.getLogger(__name__)

API_VERSIONS_KEY = 18




class KafkaApis:
    def __init__(self, services: BrokerServices) -> None:
        self.services = services
        self.handlers: dict[int, ApiHandler] = handlers()

    def handle(
        self, frame: bytes, listener: str, peer: str
    ) -> bytes | memoryview | Awaitable[memoryview | None] | None:
        try:
            api_key, version, correlation_id = hdr.peek_api(frame)
        except hdr.HeaderError as exc:
            raise InvalidRequest(str(exc)) from None
        handler = self.handlers.get(api_key)
        if handler is None or not handler.min_version <= version <= handler.max_version:
            return self._unsupported(api_key, version, correlation_id, frame)
        try:
            request_cls = messages.request_class(api_key, version)
            header = hdr.parse_request_header(frame, request_cls.__flexible__)
            request = messages.decode_request(api_key, version, frame, header.body_offset)
        except messages.UnsupportedApi:
            return self._unsupported(api_key, version, correlation_id, frame)
        except Exception as exc:  # kio raises assorted errors on malformed input
            raise InvalidRequest(f"cannot decode api {api_key} v{version}: {exc!r}") from None
        ctx = RequestContext(
            services=self.services,
            api_key=api_key,
            api_version=version,
            correlation_id=correlation_id,
            client_id=header.client_id,
            listener=listener,
            peer=peer,
            shapes=messages.shapes(api_key, version),
        )
        result = handler.handle(ctx, request)
        if inspect.isawaitable(result):
            return self._finish(ctx, result)
        return self._frame(ctx, result)

    async def _finish(self, ctx: RequestContext, pending: Awaitable[Any]) -> memoryview | None:
        return self._frame(ctx, await pending)

    @staticmethod
    def _frame(ctx: RequestContext, response: Any) -> memoryview | None:
        if response is None:
            return None
        flexible = type(response).__flexible__ and ctx.api_key != API_VERSIONS_KEY
        return messages.encode_response(ctx.correlation_id, response, flexible)

    def _unsupported(self, api_key: int, version: int, correlation_id: int, frame: bytes) -> bytes | memoryview:
        """The protocol's answer to an API or version we do not serve, instead of a dropped connection.

        ApiVersions gets a v0 response listing what we do support (clients then retry at a version
        we know); other APIs get UNSUPPORTED_VERSION as a bare error code after the header.
        """
        log.info("unsupported api %d v%d from request %d", api_key, version, correlation_id)
        if api_key == API_VERSIONS_KEY:
            from bus.broker.apis.api_versions import api_versions_response

            shapes = messages.shapes(API_VERSIONS_KEY, 0)
            response = api_versions_response(self.handlers, shapes, ErrorCode.unsupported_version)
            return messages.encode_response(correlation_id, response, False)
        return hdr.response_frame(correlation_id, struct.pack(">h", ErrorCode.unsupported_version.value), False)
