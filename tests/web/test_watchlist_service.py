"""The console with the real surveillance service and hit loader: a command issued through the API is accepted
by the service, a capture of the watched plate becomes a hit the console lists with its trajectory, a malformed
command written straight to the control topic is shown rejected with the service's reason, and a statistic
started through the API gets results. Real processes: console, broker, gateway, ``python -m surveillance``,
``python -m surveillance.loader``; captures produced with confluent-kafka as the simulator would.
"""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from contracts.processes import spawn
from contracts.records import CITY_TZ, Kind, encode, format_time
from deploy.processes.console import ConsoleProcess
from ingest.city import build_city
from testkit import web_data as data
from tests.web.conftest import MAP_CHECKPOINTS, MAP_SEED
from tests.web.test_watchlist_api import wait_for

pytestmark = pytest.mark.slow
PLATE = "浙K3S7Q1"


@pytest.fixture(scope="module")
def service(console: ConsoleProcess) -> Iterator[Path]:
    """``python -m surveillance`` and its loader on the console's bus and HBase, until the module ends."""
    backing = console.backing
    config = backing.root / "surveillance.toml"
    config.write_text(f'[bus]\nbootstrap_servers = "{backing.broker.bootstrap}"\n'
                      f'[hbase]\nhost = "127.0.0.1"\nport = {backing.gateway.port}\n'
                      f'[map]\npath = "{console.map_path}"\n[surveillance]\nmetrics_port = 0\n')
    log = backing.root / "surveillance.log"
    procs = []
    with log.open("ab") as out:
        for module in ("surveillance", "surveillance.loader"):
            procs.append(spawn([sys.executable, "-m", module, "--config", str(config)], out))
    try:
        wait_for(lambda: "surveillance ready" in log.read_text(errors="replace"), timeout=90)
        yield log
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.wait(30)


def produce(console: ConsoleProcess, topic: str, key: str, value: bytes) -> None:
    producer = Producer({"bootstrap.servers": console.backing.broker.bootstrap})
    producer.produce(topic, value, key=key.encode())
    assert producer.flush(15) == 0


def sightings(n: int) -> list[dict[str, Any]]:
    """``n`` vehicle captures of PLATE, a minute apart, at the checkpoints of the console's map."""
    city = build_city(MAP_SEED, MAP_CHECKPOINTS)
    start = datetime.now(CITY_TZ) - timedelta(minutes=n)
    records = [r for kind, r in data.valid_records(200, seed=5, city=city) if kind is Kind.VEHICLE]
    chosen, seen = [], set()
    for record in records:  # distinct checkpoints of one district: a plausible drive
        if record["checkpoint_id"] not in seen:
            seen.add(record["checkpoint_id"])
            chosen.append(record)
    return [{**r, "plate_number": PLATE, "capture_time": format_time(start + timedelta(minutes=i * 30))}
            for i, r in enumerate(chosen[:n])]


def test_watch_through_the_console_hits_and_trajectory(console: ConsoleProcess, service: Path) -> None:
    operator, viewer = console.client("operator"), console.client("viewer")
    created = operator.post("/api/v1/watchlist", json={"kind": "plate", "plate": PLATE, "reason": "reported"})
    assert created.status_code == 201, created.text
    watch_id = created.json()["watch_id"]

    def status() -> str | None:
        page = viewer.get("/api/v1/watchlist", params={"limit": 500}).json()
        return next((w["status"] for w in page["items"] if w["watch_id"] == watch_id), None)

    assert wait_for(lambda: status() == "accepted", timeout=30)
    records = sightings(3)
    for record in records:
        produce(console, "capture.vehicle", record["checkpoint_id"], encode(record))

    def hits() -> dict[str, Any] | None:
        answer = viewer.get(f"/api/v1/watchlist/{watch_id}/hits").json()
        return answer if len(answer["items"]) == 3 else None

    answer = wait_for(hits, timeout=60)
    assert [h["record_id"] for h in answer["items"]] == [r["record_id"] for r in reversed(records)]
    assert [p["checkpoint_id"] for p in answer["trajectory"]] == [r["checkpoint_id"] for r in records]
    assert all(p["location"]["lat"] is not None for p in answer["trajectory"])
    assert answer["watch"]["hits"] == 3 and {h["match"] for h in answer["items"]} == {"exact"}


def test_a_malformed_command_on_the_topic_is_shown_rejected_with_the_reason(console: ConsoleProcess,
                                                                             service: Path) -> None:
    bad = {"watch_id": "written-by-hand", "kind": "face", "feature": "AAAA", "requested_by": "someone"}
    produce(console, "control.watchlist", bad["watch_id"], json.dumps(bad).encode())

    def shown() -> dict[str, Any] | None:
        page = console.client("viewer").get("/api/v1/watchlist", params={"limit": 500}).json()
        found = next((w for w in page["items"] if w["watch_id"] == "written-by-hand"), None)
        return found if found and found["status"] == "rejected" else None

    watch = wait_for(shown, timeout=30)
    assert "feature" in watch["status_reason"], watch


def test_a_statistic_started_through_the_console_gets_results(console: ConsoleProcess, service: Path) -> None:
    operator = console.client("operator")
    stat_id = operator.post("/api/v1/stats", json={"measure": "vehicle_count", "group_by": "city",
                                                   "window_s": 60}).json()["stat_id"]
    assert wait_for(lambda: operator.get(f"/api/v1/stats/{stat_id}/results").json()["stat"]["status"] == "accepted",
                    timeout=30)
    now = datetime.now(CITY_TZ)
    records = [r for kind, r in data.valid_records(40, seed=9, city=build_city(MAP_SEED, MAP_CHECKPOINTS))
               if kind is Kind.VEHICLE][:10]
    for record in records:
        produce(console, "capture.vehicle", record["checkpoint_id"],
                encode({**record, "capture_time": format_time(now)}))

    def counted() -> list[dict[str, Any]] | None:
        results = operator.get(f"/api/v1/stats/{stat_id}/results").json()["results"]
        return results if results and sum(r["value"] for r in results) >= len(records) else None

    results = wait_for(counted, timeout=60)
    assert {r["group"] for r in results} == {"city"}
