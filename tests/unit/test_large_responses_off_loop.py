"""A Metadata response for thousands of partitions is encoded off the event loop.

kio's encoder is pure Python (about 20 us per partition), so a client asking for a 2,000-partition topic
held every other connection for 40 ms or more; librdkafka asks for it on start and on every refresh. In a
worker thread the encoder still needs the GIL, but the loop gets it back every switch interval (5 ms).
"""

from __future__ import annotations

import asyncio
import inspect
import io
import time
from pathlib import Path

from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.metadata.v12.response import MetadataResponse
from kio.schema.request_header.v2.header import RequestHeader
from kio.schema.types import TopicName
from kio.serial import entity_reader, entity_writer

from bus.broker.broker import Broker
from bus.config.broker import load_broker_config
from bus.controller.controller import TopicSpec

PARTITIONS = 2000


def _metadata_frame(topic: str) -> bytes:
    buf = io.BytesIO()
    entity_writer(RequestHeader)(buf, RequestHeader(request_api_key=3, request_api_version=12, correlation_id=7,
                                                    client_id="test"))
    entity_writer(MetadataRequest)(buf, MetadataRequest(
        topics=(MetadataRequestTopic(topic_id=None, name=TopicName(topic)),),
        allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    return buf.getvalue()


async def _ticks_while(work: asyncio.Future[object], interval: float = 0.001) -> int:
    """How often the loop woke a 1 ms sleeper while `work` ran: once if the work held the loop throughout."""
    ticks = 0
    while not work.done():
        await asyncio.sleep(interval)
        ticks += 1
    return ticks


def test_a_metadata_response_for_thousands_of_partitions_leaves_the_loop_free(tmp_path: Path) -> None:
    config = load_broker_config({"log.dirs": str(tmp_path / "data"), "node.id": "1", "log.cleaner.enable": "false",
                                 "listeners": "PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0"})

    async def scenario() -> tuple[int, float, bytes]:
        broker = Broker(config)
        try:
            broker.controller.create_topic(TopicSpec("wide", PARTITIONS, 1))
            await broker.controller.log.sync()  # committed (fsynced, off the loop) and so in the image
            await broker.replicas.settled()
            assert len(broker.controller.image.topics["wide"].partitions) == PARTITIONS
            frame = _metadata_frame("wide")

            async def ask() -> bytes:
                result = broker.apis.handle(frame, "PLAINTEXT", "127.0.0.1:1")
                return bytes(await result if inspect.isawaitable(result) else result)  # type: ignore[arg-type]

            started = time.perf_counter()
            work = asyncio.ensure_future(ask())
            ticks = await _ticks_while(work)
            return ticks, time.perf_counter() - started, await work
        finally:
            broker.logs.close()

    ticks, took, response = asyncio.run(scenario())
    header_size = 4 + 4 + 1  # size, correlation id, empty tagged fields (flexible response header)
    decoded, _ = entity_reader(MetadataResponse)(response, header_size)
    assert [p.partition_index for p in decoded.topics[0].partitions] == list(range(PARTITIONS))
    # Building and encoding took tens of ms, in a thread that hands the GIL back every switch interval (5 ms):
    # the loop woke its sleeper several times meanwhile. On the loop, the work ran in one piece: one wake-up.
    # (Counting wake-ups, not the longest gap, keeps the test steady on a loaded machine.)
    assert ticks >= 3, (ticks, took)
