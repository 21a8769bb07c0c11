"""The capture ingest at a site that stands by (`[site]`, `spark_jobs/ingest_captures.py`): it goes on loading what
the mirror brings into its site's HBase, and publishes its stats and dead letters to its site's own copies
(``primary.ingest.stats``, ``primary.capture.deadletter``), never to the mirrored topics, whose one writer there is
the mirror. Real broker, HBase gateway and Spark job; the record names the DR site, so the primary stands by.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from contracts import active_site
from contracts.ingest_stats import parse_stats
from contracts.topics import Topics
from deploy.processes.broker import BrokerProcess
from deploy.processes.gateway import Gateway, start_gateway
from deploy.processes.ingest import ingest_job, simulate
from tests.integration._ingest_support import read_all, row_counts

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("spark"), pytest.mark.timeout(600)]
TOPICS = Topics()


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[Gateway]:
    gw = start_gateway(tmp_path / "hbase")
    yield gw
    gw.kill()


def test_a_standing_by_primary_loads_on_and_publishes_to_its_own_copies(tmp_path: Path, gateway: Gateway) -> None:
    active_site.write(tmp_path, active_site.ActiveSite("dr", dt.datetime.now(dt.UTC), "switchover"))
    config = tmp_path / "primary.toml"
    config.write_text(f'[site]\nname = "primary"\nrecord = "{active_site.path(tmp_path)}"\n')
    broker = BrokerProcess(tmp_path / "broker").start()
    try:
        summary = simulate(broker.bootstrap, tmp_path, "--count", "600", "--rate", "600", "--seed", "3",
                           "--malformed-rate", "0.05")
        malformed = sum(summary["malformed"].values())
        assert malformed > 0
        job = ingest_job(broker.bootstrap, gateway.port, tmp_path / "ckpt", tmp_path / "job.log", "--config",
                         str(config), "--once")
        try:
            assert job.wait(300) == 0, (tmp_path / "job.log").read_text()[-5000:]
        finally:
            job.kill()
        counts = row_counts(gateway.connect(timeout=60_000))
        assert counts["vehicle"] + counts["face"] + counts["capture_unrecognized"] == 600 - malformed
        stats = [parse_stats(value) for _, value in read_all(broker.bootstrap, "primary.ingest.stats")]
        assert sum(s.read for s in stats) == 600
        assert len(read_all(broker.bootstrap, "primary.capture.deadletter")) == malformed
        for mirrored in (TOPICS.ingest_stats, TOPICS.deadletter):  # made at start, never written
            assert mirrored in AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10).topics
            assert read_all(broker.bootstrap, mirrored) == []
    finally:
        broker.stop()
