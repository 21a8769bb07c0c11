"""`make up PROMETHEUS=1`: Debian's real prometheus, started by `python -m deploy.up --prometheus`, scrapes every
process make up started and finds each target up, with the rules of deploy/prometheus/ loaded and the broker's
Kafka-named metrics queryable."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import httpx
import pytest

from contracts.ports import free_port
from deploy.processes.make_up import MAKE_UP_PORTS, console_client, down, start_up, write_config

EXPECTED_JOBS = {"bus", "monitor", "surveillance", "mirror", "object_store", "hbase", "console"}


def _targets(port: int) -> list[dict[str, object]]:
    try:
        answer = httpx.get(f"http://127.0.0.1:{port}/api/v1/targets", timeout=5).json()
    except (httpx.HTTPError, ValueError):
        return []
    return list(answer["data"]["activeTargets"])


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_prometheus_scrapes_every_process_and_finds_it_up(tmp_path: Path) -> None:
    if shutil.which("prometheus") is None:
        pytest.fail("Debian's prometheus is missing: run `make system-deps`")
    ports = {name: free_port() for name in (*MAKE_UP_PORTS, "busm", "s3m", "hbm", "prom")}
    config = write_config(tmp_path, ports)
    data_dir = tmp_path / "data"
    proc, output = start_up(config, data_dir, ports, "--prometheus", timeout=180)
    try:
        assert f"Prometheus http://127.0.0.1:{ports['prom']}" in output, output
        deadline = time.monotonic() + 120
        targets = _targets(ports["prom"])
        while time.monotonic() < deadline and not (
                {t["labels"]["job"] for t in targets} >= EXPECTED_JOBS  # type: ignore[index]
                and all(t["health"] == "up" for t in targets)):
            time.sleep(2)
            targets = _targets(ports["prom"])
        health = {t["labels"]["job"]: (t["health"], t.get("lastError")) for t in targets}  # type: ignore[index]
        assert set(health) >= EXPECTED_JOBS and all(state == "up" for state, _ in health.values()), health
        rules = httpx.get(f"http://127.0.0.1:{ports['prom']}/api/v1/rules", timeout=5).json()["data"]["groups"]
        assert {group["name"] for group in rules} >= {"bus.alerts", "bus.recording", "pipeline.alerts"}
        query = httpx.get(f"http://127.0.0.1:{ports['prom']}/api/v1/query", timeout=5,
                          params={"query": "kafka_controller_kafkacontroller_activecontrollercount"}).json()
        assert [float(r["value"][1]) for r in query["data"]["result"]] == [1.0], query
        # The console's monitoring page links to it.
        password = (data_dir / "console" / "admin_password").read_text().strip()
        with console_client(data_dir, ports["console"]) as console:  # HTTPS: Prometheus scrapes it so too
            assert console.post("/api/v1/auth/session",
                                data={"username": "admin", "password": password}).status_code == 200
            page = console.get("/monitoring")
        assert page.status_code == 200 and f'href="http://127.0.0.1:{ports["prom"]}"' in page.text
    finally:
        said = down(data_dir, proc, timeout=180)
    assert "stopped" in said, said
