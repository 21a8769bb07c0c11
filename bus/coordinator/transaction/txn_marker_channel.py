"""Transaction markers for partitions other nodes lead (Kafka's TransactionMarkerChannelManager).

The transaction coordinator writes a commit/abort marker into every partition of a transaction; those this node
leads it appends itself. For the others it hands the marker here: WriteTxnMarkers (27) goes to the partition's
current leader, one connection per node, and is retried (the leader may be moving, or down until the controller
elects another) until the leader answers that the marker is replicated. Only a partition that no longer exists
needs no marker. Until its markers are written, the transaction stays in PrepareCommit/PrepareAbort and its
producer gets CONCURRENT_TRANSACTIONS, as in Kafka.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from kio.schema.errors import ErrorCode

from bus.controller.image import MetadataImage
from bus.network.network_client import NodeConnection, NodeConnectionError
from bus.network.node_security import NO_SECURITY, NodeSecurity
from bus.protocol.messages import request_shapes

log = logging.getLogger(__name__)

WRITE_TXN_MARKERS = 27
WRITE_TXN_MARKERS_VERSION = 1
RETRY_BACKOFF_S = 0.1
RETRY_BACKOFF_MAX_S = 1.0


class TxnMarkerChannel:
    def __init__(self, node_id: int, image: Callable[[], MetadataImage],
                 endpoint_of: Callable[[int], tuple[str, int] | None], request_timeout_s: float,
                 security: NodeSecurity = NO_SECURITY) -> None:
        self.node_id = node_id
        self.security = security  # how the other brokers' inter-broker listener is reached
        self._image = image
        self._endpoint_of = endpoint_of
        self._request_timeout_s = request_timeout_s
        self._connections: dict[int, NodeConnection] = {}

    async def write(self, topic: str, partition: int, producer_id: int, producer_epoch: int, commit: bool,
                    coordinator_epoch: int = 0) -> None:
        """Return once the partition's leader has the marker replicated (or the partition is gone)."""
        backoff = RETRY_BACKOFF_S
        failures = 0
        while True:
            image = self._image().topics.get(topic)
            state = None if image is None else image.partitions.get(partition)
            if state is None:
                log.info("no marker for producer %d in %s-%d: the partition is gone", producer_id, topic, partition)
                return
            try:
                code = await self._send(state.leader, topic, partition, producer_id, producer_epoch, commit,
                                        coordinator_epoch)
            except NodeConnectionError as exc:
                code, detail = None, str(exc)
            else:
                detail = code.name if code is not None else "no leader"
            if code == ErrorCode.none:
                return
            failures += 1
            if failures % 20 == 1:  # the first failure and then every few seconds
                log.warning("marker for producer %d in %s-%d not written yet (leader %d: %s); retrying",
                            producer_id, topic, partition, state.leader, detail)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, RETRY_BACKOFF_MAX_S)

    async def _send(self, leader: int, topic: str, partition: int, producer_id: int, producer_epoch: int,
                    commit: bool, coordinator_epoch: int) -> ErrorCode | None:
        """The leader's answer for this one partition; None while there is no leader or no endpoint for it."""
        connection = await self._connection(leader) if leader >= 0 else None
        if connection is None:
            return None
        shapes = request_shapes(WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION)
        request = shapes.make("WriteTxnMarkersRequest", markers=[shapes.make(
            "WritableTxnMarker", producer_id=producer_id, producer_epoch=producer_epoch, transaction_result=commit,
            coordinator_epoch=coordinator_epoch,
            topics=[shapes.make("WritableTxnMarkerTopic", name=topic, partition_indexes=[partition])])])
        response = await connection.request(request, WRITE_TXN_MARKERS_VERSION)
        return ErrorCode(response.markers[0].topics[0].partitions[0].error_code)

    async def _connection(self, broker_id: int) -> NodeConnection | None:
        """The connection to a broker's registered endpoint (a new one when it moved), None while unknown."""
        endpoint = self._endpoint_of(broker_id)
        connection = self._connections.get(broker_id)
        if connection is not None and (connection.host, connection.port) != endpoint:
            del self._connections[broker_id]
            await connection.close()
            connection = None
        if endpoint is None:
            return None
        if connection is None:
            timeout_s = self._request_timeout_s
            connection = self._connections[broker_id] = NodeConnection(
                endpoint[0], endpoint[1], f"broker-{self.node_id}-txn-markers", request_timeout_s=timeout_s,
                connect_timeout_s=timeout_s, security=self.security)
        return connection

    async def close(self) -> None:
        connections, self._connections = list(self._connections.values()), {}
        for connection in connections:
            await connection.close()
