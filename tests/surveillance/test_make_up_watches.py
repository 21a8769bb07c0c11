"""What `make up` relies on for hits within a minute: the target watches rebuilt from the simulator's seed
(``deploy.surveillance``) match what the real simulator then drives around, through the real service and the
real hit loader into HBase. Real processes only: broker, HBase gateway, simulator, service, loader.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from contracts.config import load
from contracts.processes import spawn
from contracts.tables.surveillance import BY_WATCH_TABLE, read_hit, watch_prefix
from deploy.processes.broker import BrokerProcess
from deploy.processes.gateway import start_gateway
from deploy.surveillance import services, wait_for_map, watch_targets

SEED = 20260302


@pytest.mark.slow
def test_target_watches_get_hits_within_a_minute(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "broker").start()
    gateway = start_gateway(tmp_path / "hbase", log_dir=tmp_path)
    procs: list[subprocess.Popen[bytes]] = []
    map_file = tmp_path / "deployment_map.json"
    config_path = tmp_path / "solution.toml"
    config_path.write_text(f'[bus]\nbootstrap_servers = "{broker.bootstrap}"\n'
                           f'[hbase]\nhost = "127.0.0.1"\nport = {gateway.port}\n'
                           f'[map]\npath = "{map_file}"\n[surveillance]\nmetrics_port = 0\n')
    config = load(config_path)

    def start(name: str, cmd: list[str]) -> None:
        procs.append(spawn(cmd, tmp_path / f"{name}.log"))

    try:
        launched = time.time()
        start("simulator", [sys.executable, "-m", "ingest.simulate", "--config", str(config_path), "--seed", str(SEED),
                            "--rate", "150", "--duration", "150", "--status-interval", "0", "--map", str(map_file)])
        assert wait_for_map(map_file, launched), (tmp_path / "simulator.log").read_text()
        line = watch_targets(config, SEED)
        assert "watching the simulator's target plates" in line, line
        for name, cmd, _where in services(config):
            start(name.replace(" ", "-"), cmd)
        started = time.monotonic()
        conn = gateway.connect()
        watches = ("demo-plate-1", "demo-plate-2", "demo-face-1")
        found: dict[str, dict] = {}
        while len(found) < len(watches) and time.monotonic() - started < 60:
            for watch_id in watches:
                if watch_id not in found and BY_WATCH_TABLE.encode() in conn.tables():
                    rows = list(conn.table(BY_WATCH_TABLE).scan(row_prefix=watch_prefix(watch_id), limit=1))
                    if rows:
                        found[watch_id] = read_hit(rows[0][1])
            assert all(p.poll() is None for p in procs), [(tmp_path / f).read_text()[-2000:]
                                                          for f in ("surveillance.log", "hit-loader.log")]
            time.sleep(1)
        print(f"hits for {sorted(found)} {time.monotonic() - started:.0f} s after the service started")
        assert set(found) == set(watches), (tmp_path / "surveillance.log").read_text()[-3000:]
        assert found["demo-face-1"]["kind"] == "face" and found["demo-plate-1"]["match"] in ("exact", "fuzzy")
        assert found["demo-plate-1"]["location"].get("lat") is not None  # the service read this run's map
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        gateway.kill()
        broker.stop()
