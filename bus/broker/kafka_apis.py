"""Request dispatch (Kafka's KafkaApis): frame -> header -> handler -> response frame.

Handlers live one per API in `bus.broker.apis`; each declares its key and version range and
returns a response dataclass, `None` (acks=0 produce) or an awaitable of either, so that only
requests that must wait (long-poll fetch) pay for a task.

A handler that raises (a bug, or a failure it did not foresee) answers UNKNOWN_SERVER_ERROR for that
request, in every error field of the response (`bus.protocol.error_response`), as Kafka's
`requestHelper.handleError` does, and the connection stays open. Requests that cannot be decoded still
close it (InvalidRequest), as in Kafka.

On a node of a quorum, an admin request that only the active controller can run is forwarded to it
(`ControllerChannel`) with the principal that sent it, which the controller authorizes; a metadata change this node
made that cannot be committed (it lost the leadership first) is forwarded to the new active controller, as is one
the handler answered NOT_CONTROLLER in every error field (the node stopped being the active controller as it ran);
one that came in an Envelope answers NOT_CONTROLLER, which its sender retries.

`handle` takes the connection's principal (Kafka's ANONYMOUS unless the connection authenticated) and hands it to
the handler in its RequestContext with the client's host, which is what the authorizer checks.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import struct
import time
from collections.abc import Awaitable
from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.apis import ApiHandler, handlers
from bus.broker.apis._common import LARGE_RESPONSE_ITEMS
from bus.broker.context import BrokerServices, RequestContext
from bus.broker.metrics import RequestMetrics
from bus.broker.replica_manager import ReplicaManager
from bus.controller.controller import ControllerError
from bus.controller.controller_channel import FORWARDED_APIS, ControllerUnavailable
from bus.controller.metadata_log.record_log import MetadataRecordLog
from bus.network.errors import CloseConnection, InvalidRequest
from bus.protocol import header as hdr
from bus.protocol import messages, produce_codec
from bus.protocol.error_response import ERROR_MESSAGES, answers_only
from bus.security.acls import ANONYMOUS
from bus.security.authenticator import SaslAuthenticator

log = logging.getLogger(__name__)

API_VERSIONS_KEY = 18
PRODUCE_KEY = 0


async def _after_sync(ctx: RequestContext, request: Any, frame: bytes, metadata_log: MetadataRecordLog,
                      replicas: ReplicaManager, result: Any) -> Any:
    """A request that changed metadata answers once the change is committed (fsynced) and its new logs exist.

    A client's admin request whose change could not commit because this node lost the controller's leadership
    first is forwarded to the new active controller (its answer is a response frame), as Kafka's Java admin client
    would retry it there: librdkafka fails the call on a per-topic NOT_CONTROLLER. One that came in an Envelope
    answers NOT_CONTROLLER, which the forwarding node retries."""
    try:
        await metadata_log.sync()
    except ControllerError as exc:
        log.info("api %d request %d from %s: %s", ctx.api_key, ctx.correlation_id, ctx.peer, exc.message)
        if inspect.iscoroutine(result):
            result.close()
        channel = ctx.services.controller_channel
        if (exc.code == ErrorCode.not_controller and channel is not None and ctx.api_key in FORWARDED_APIS
                and not ctx.enveloped):
            with contextlib.suppress(ControllerUnavailable):
                return await channel.forward(frame, ctx.peer, ctx.principal)
        return ctx.error_response(request, exc.code)
    await replicas.settled()
    return await result if inspect.isawaitable(result) else result


def peer_host(peer: str) -> str:
    """The host of a "host:port" peer ("[::1]:9092" -> "::1"), as ACL hosts name it."""
    return peer.rsplit(":", 1)[0].strip("[]") if ":" in peer else peer


class KafkaApis:
    def __init__(self, services: BrokerServices, table: dict[int, ApiHandler] | None = None) -> None:
        """`table`: the APIs served (default: every client API; the controller listener passes its own). Each
        KafkaApis keeps its own copy: the tables are cached per process, and a change to one broker's (a test
        replacing a handler) must not reach every other broker in the process."""
        self.services = services
        self.handlers: dict[int, ApiHandler] = dict(handlers() if table is None else table)
        self.metrics = RequestMetrics()

    def handle(
        self, frame: bytes, listener: str, peer: str, *, principal: str = ANONYMOUS, client_host: str | None = None,
        sasl: SaslAuthenticator | None = None,
    ) -> bytes | memoryview | Awaitable[bytes | memoryview | None] | None:
        """The response to one request frame (without its size prefix) from `peer` ("host:port") on `listener`.
        `client_host`: the client's address when `peer` is not the client (an Envelope names the client's);
        `sasl`: the connection's SASL exchange on a SASL listener, which SaslHandshake and SaslAuthenticate drive."""
        try:
            api_key, version, correlation_id = hdr.peek_api(frame)
        except hdr.HeaderError as exc:
            raise InvalidRequest(str(exc)) from None
        handler = self.handlers.get(api_key)
        if handler is None or not handler.min_version <= version <= handler.max_version:
            return self._unsupported(api_key, version, correlation_id, frame)
        try:
            if api_key == PRODUCE_KEY:  # the hot path: checked and read in one walk, no kio dataclasses
                header = hdr.parse_request_header(frame, version >= produce_codec.FLEXIBLE_FROM)
                request = produce_codec.parse_request(frame, header.body_offset, version)
            else:
                request_cls = messages.request_class(api_key, version)
                header = hdr.parse_request_header(frame, request_cls.__flexible__)  # type: ignore[attr-defined]
                request = messages.decode_request(api_key, version, frame, header.body_offset)
        except messages.UnsupportedApi:
            return self._unsupported(api_key, version, correlation_id, frame)
        except Exception as exc:  # kio raises assorted errors on malformed input
            raise InvalidRequest(f"cannot decode api {api_key} v{version}: {exc!r}") from None
        ctx = RequestContext(
            self.services, api_key, version, correlation_id, header.client_id, listener, peer,
            messages.shapes(api_key, version), principal, peer_host(peer) if client_host is None else client_host,
            sasl, enveloped=client_host is not None,
        )
        started = time.perf_counter()
        channel = self.services.controller_channel
        if channel is not None and channel.forwards(api_key):
            return self._forwarded(ctx, request, frame, started)
        metadata_log = self.services.controller.log
        written = metadata_log.written
        try:
            result = handler.handle(ctx, request)
        except InvalidRequest:
            raise
        except Exception:
            return self._failed(ctx, request)
        if metadata_log.written != written:  # it changed metadata: answer once that is fsynced (off the loop)
            result = _after_sync(ctx, request, frame, metadata_log, self.services.replicas, result)
        elif (channel is not None and api_key in FORWARDED_APIS and not ctx.enveloped
              and not inspect.isawaitable(result) and result is not None
              and answers_only(result, ErrorCode.not_controller)):
            # this node stopped being the active controller between the check above and the handler: the client's
            # request goes to the new one, as one that could not commit does (`_after_sync`)
            log.info("api %d request %d from %s: not the active controller any more, forwarded", api_key,
                     correlation_id, peer)
            return self._forwarded(ctx, request, frame, started)
        if type(result) is produce_codec.ProduceAnswer:  # the hot path: neither awaitable nor large
            response: bytes | memoryview | None = produce_codec.encode_answer(correlation_id, result, version)
        else:
            if inspect.isawaitable(result) or self._large(handler, result):
                return self._finish(ctx, handler, request, result, started)
            response = self._frame(ctx, result)
        self.metrics.observe(api_key, time.perf_counter() - started)
        return response

    @staticmethod
    def _large(handler: ApiHandler, response: Any) -> bool:
        return (handler.response_items is not None and response is not None
                and handler.response_items(response) > LARGE_RESPONSE_ITEMS)

    async def _finish(self, ctx: RequestContext, handler: ApiHandler, request: Any, pending: Any,
                      started: float) -> bytes | memoryview | None:
        """Await the handler's result if it must wait, then encode it (off the loop if large)."""
        try:
            result = await pending if inspect.isawaitable(pending) else pending
            if isinstance(result, (bytes, memoryview)):  # the new active controller's answer (`_after_sync`)
                response: bytes | memoryview | None = result
            elif self._large(handler, result):
                response = await asyncio.to_thread(self._frame, ctx, result)
            else:
                response = self._frame(ctx, result)
        except InvalidRequest:
            raise
        except Exception:
            return self._failed(ctx, request)
        self.metrics.observe(ctx.api_key, time.perf_counter() - started)
        return response

    async def _forwarded(self, ctx: RequestContext, request: Any, frame: bytes, started: float) -> bytes | memoryview:
        """The active controller's answer to a request this node may not run (KIP-590 forwarding)."""
        channel = self.services.controller_channel
        assert channel is not None
        try:
            response: bytes | memoryview = await channel.forward(frame, ctx.peer, ctx.principal)
        except ControllerUnavailable as exc:
            log.info("api %d request %d from %s not forwarded: %s", ctx.api_key, ctx.correlation_id, ctx.peer, exc)
            framed = self._frame(ctx, ctx.error_response(request, ErrorCode.not_controller))
            assert framed is not None
            response = framed
        self.metrics.observe(ctx.api_key, time.perf_counter() - started)
        return response

    def _failed(self, ctx: RequestContext, request: Any) -> bytes | memoryview | None:
        """Log the handler's exception and answer UNKNOWN_SERVER_ERROR; acks=0 produce has no answer, so Kafka
        closes the connection instead."""
        log.exception("handler of api %d v%d failed on request %d from %s", ctx.api_key, ctx.api_version,
                      ctx.correlation_id, ctx.peer)
        self.metrics.failed(ctx.api_key)
        if ctx.api_key == PRODUCE_KEY:
            if request.acks == 0:
                raise CloseConnection("acks=0 produce failed: UNKNOWN_SERVER_ERROR")
            code = ErrorCode.unknown_server_error
            answer = produce_codec.error_answer(request, code.value, ERROR_MESSAGES[code])
            return produce_codec.encode_response(ctx.correlation_id, answer, ctx.api_version)
        return self._frame(ctx, ctx.error_response(request, ErrorCode.unknown_server_error))

    @staticmethod
    def _frame(ctx: RequestContext, response: Any) -> bytes | memoryview | None:
        if response is None:
            return None
        if type(response) is produce_codec.ProduceAnswer:
            return produce_codec.encode_answer(ctx.correlation_id, response, ctx.api_version)
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
