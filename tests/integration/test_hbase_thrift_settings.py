"""Real-HBase client settings (issue 30): the gateway serving framed transport and the compact protocol, as a
production HBase Thrift server often does, and the capture slice through it end to end with ``[hbase]`` saying so; a
client with settings the server does not speak is told which settings to compare, at once."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from contracts.hbase import HBaseClient, HBaseMismatch
from contracts.ports import free_port
from deploy.processes.broker import BrokerProcess
from deploy.processes.gateway import Gateway, start_gateway
from deploy.processes.ingest import ingest_job, simulate
from tests.integration._ingest_support import row_counts
from tests.integration.test_ingest_end_to_end import expected_counts

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("spark"), pytest.mark.timeout(600)]
JOB_DEADLINE_S = 300
FRAMED_COMPACT = '[hbase]\ntransport = "framed"\nprotocol = "compact"\n'


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[Gateway]:
    gw = start_gateway(tmp_path / "hbase", "--transport", "framed", "--protocol", "compact")
    yield gw
    gw.kill()


def test_check_names_the_settings_to_compare(gateway: Gateway) -> None:
    HBaseClient(port=gateway.port, transport="framed", protocol="compact").check()
    for transport, protocol in (("buffered", "binary"), ("framed", "binary"), ("buffered", "compact")):
        began = time.monotonic()
        with pytest.raises(HBaseMismatch, match=r"set \[hbase\] transport .* and protocol"):
            HBaseClient(port=gateway.port, transport=transport, protocol=protocol).check()
        assert time.monotonic() - began < 10
    with pytest.raises(ConnectionError, match=r"cannot connect to HBase Thrift at 127\.0\.0\.1"):
        HBaseClient(port=free_port()).check()


def test_the_capture_slice_with_framed_transport_and_compact_protocol(tmp_path: Path, broker: BrokerProcess,
                                                                     gateway: Gateway) -> None:
    summary = simulate(broker.bootstrap, tmp_path, "--count", "1500", "--rate", "3000", "--seed", "8",
                       "--failure-rate", "0.05", "--malformed-rate", "0.01")
    config = tmp_path / "framed-compact.toml"
    config.write_text(FRAMED_COMPACT)
    log = tmp_path / "job.log"
    job = ingest_job(broker.bootstrap, gateway.port, tmp_path / "ckpt", log, "--once", "--config", str(config))
    try:
        assert job.wait(JOB_DEADLINE_S) == 0, log.read_text()[-5000:]
    finally:
        job.kill()
    conn = gateway.connect(transport="framed", protocol="compact")
    try:
        assert row_counts(conn) == expected_counts(summary)
    finally:
        conn.close()

    # The same job with happybase's defaults against this server: it stops at once and says what to set.
    mismatched = ingest_job(broker.bootstrap, gateway.port, tmp_path / "ckpt2", log, "--once")
    try:
        assert mismatched.wait(JOB_DEADLINE_S) != 0
    finally:
        mismatched.kill()
    assert "set [hbase] transport (buffered|framed) and protocol (binary|compact)" in log.read_text()
