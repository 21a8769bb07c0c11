"""A reply reaches the client whole or not at all (``GatewayServer`` on a real socket, a real thriftpy2 client).

The bug this pins: a reply bigger than the connection's 256 KiB buffer whose encoding failed half-way
left its first part on the wire, followed by the error answer; happybase decoded the mix and spun in
thriftpy2's C decoder (a CI run hung in ``count_rows``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from thriftpy2.rpc import make_client
from thriftpy2.transport import TBufferedTransportFactory

from deploy.hbase_gateway.idl import Hbase
from deploy.hbase_gateway.server import GatewayServer


class _Handler:
    """``getTableNames`` answers a list whose last item cannot be encoded, after ~1 MiB that can."""

    def getTableNames(self) -> list[object]:
        return [b"t" * 1000] * 1000 + [12345]

    def isTableEnabled(self, tableName: bytes) -> bool:
        return True


@pytest.fixture
def server() -> Iterator[GatewayServer]:
    srv = GatewayServer(_Handler(), "127.0.0.1", 0)
    srv.bind()
    thread = threading.Thread(target=srv.serve, daemon=True)
    thread.start()
    yield srv
    srv.stop()
    thread.join(10)


def test_a_reply_that_fails_to_encode_after_a_large_part_is_one_clean_error(server: GatewayServer) -> None:
    client = make_client(Hbase.Hbase, "127.0.0.1", server.port, trans_factory=TBufferedTransportFactory(),
                         timeout=10_000)
    try:
        with pytest.raises(Hbase.IOError, match="internal error: TDecodeException") as raised:
            client.getTableNames()
        assert len(raised.value.message) < 1000  # clipped, not the megabyte value it quotes
        assert client.isTableEnabled(b"t") is True  # the connection is still in step
    finally:
        client.close()
