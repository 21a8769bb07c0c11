"""A Metadata response for thousands of partitions is encoded off the event loop.

kio's encoder is pure Python (about 20 us per partition), so a client asking for a 2,000-partition topic
held every other connection for 40 ms or more; librdkafka asks for it on start and on every refresh. In a
worker thread the encoder still needs the GIL, but the loop gets it back every switch interval (5 ms).
"""

from __future__ import annotations

import asyncio
import inspect
import io
import threading
from pathlib import Path
from typing import Any

import pytest
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.metadata.v12.response import MetadataResponse
from kio.schema.request_header.v2.header import RequestHeader
from kio.schema.types import TopicName
from kio.serial import entity_reader, entity_writer

from bus.broker.apis import metadata
from bus.broker.broker import Broker
from bus.broker.kafka_apis import KafkaApis
from bus.config.broker import load_broker_config
from bus.controller.controller import TopicSpec

PARTITIONS = 2000
METADATA = 3


def _metadata_frame(topic: str) -> bytes:
    buf = io.BytesIO()
    entity_writer(RequestHeader)(buf, RequestHeader(request_api_key=3, request_api_version=12, correlation_id=7,
                                                    client_id="test"))
    entity_writer(MetadataRequest)(buf, MetadataRequest(
        topics=(MetadataRequestTopic(topic_id=None, name=TopicName(topic)),),
        allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    return buf.getvalue()


def test_a_metadata_response_for_thousands_of_partitions_is_built_and_encoded_off_the_loop(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Which thread builds and which encodes each answer, recorded: a 2,000-partition answer in worker threads, a
    one-partition answer on the loop (so the check tells the two apart). Counting the loop's wake-ups during the work
    instead failed on a loaded CI machine, where the scheduler decides them."""
    config = load_broker_config({"log.dirs": str(tmp_path / "data"), "node.id": "1", "log.cleaner.enable": "false",
                                 "listeners": "PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0"})
    threads: dict[str, list[int]] = {"built": [], "encoded": []}
    build, frame = metadata._response, KafkaApis._frame

    def recording_build(*args: Any) -> Any:
        threads["built"].append(threading.get_ident())
        return build(*args)

    def recording_frame(ctx: Any, response: Any) -> Any:
        if ctx.api_key == METADATA:
            threads["encoded"].append(threading.get_ident())
        return frame(ctx, response)

    monkeypatch.setattr(metadata, "_response", recording_build)
    monkeypatch.setattr(KafkaApis, "_frame", staticmethod(recording_frame))

    async def scenario() -> tuple[int, bytes]:
        broker = Broker(config)
        try:
            broker.controller.create_topic(TopicSpec("wide", PARTITIONS, 1))
            broker.controller.create_topic(TopicSpec("narrow", 1, 1))
            await broker.controller.log.sync()  # committed (fsynced, off the loop) and so in the image
            await broker.replicas.settled()
            assert len(broker.controller.image.topics["wide"].partitions) == PARTITIONS

            async def ask(topic: str) -> bytes:
                result = broker.apis.handle(_metadata_frame(topic), "PLAINTEXT", "127.0.0.1:1")
                return bytes(await result if inspect.isawaitable(result) else result)  # type: ignore[arg-type]

            await ask("narrow")
            return threading.get_ident(), await ask("wide")
        finally:
            broker.logs.close()

    loop_thread, response = asyncio.run(scenario())
    header_size = 4 + 4 + 1  # size, correlation id, empty tagged fields (flexible response header)
    decoded, _ = entity_reader(MetadataResponse)(response, header_size)
    assert [p.partition_index for p in decoded.topics[0].partitions] == list(range(PARTITIONS))
    (narrow_built, wide_built), (narrow_encoded, wide_encoded) = threads["built"], threads["encoded"]
    assert narrow_built == narrow_encoded == loop_thread  # small answers stay on the loop (no thread hop)
    assert wide_built != loop_thread and wide_encoded != loop_thread
