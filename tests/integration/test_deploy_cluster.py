"""`python -m deploy.cluster --nodes 3`: three combined nodes, one quorum, one cluster id kept across restarts,
and Ctrl-C/SIGTERM leaves no node running."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bus.client.admin import AdminClient
from deploy.processes.cluster import start_deploy_cluster

ROOT = Path(__file__).resolve().parents[2]


def _listening(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=0.5):
            return True
    except OSError:
        return False


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    proc.wait(60)


@pytest.mark.slow
def test_a_three_node_cluster_starts_keeps_its_id_and_stops(tmp_path: Path) -> None:
    proc, cluster_id, servers, _ = start_deploy_cluster(tmp_path)
    try:
        assert len(servers) == 3
        admin = AdminClient({"bootstrap.servers": ",".join(servers)})
        try:
            quorum = admin.describe_metadata_quorum()
        finally:
            admin.close()
        assert sorted(v.replica_id for v in quorum.voters) == [1, 2, 3]
        assert quorum.leader_id in (1, 2, 3)
        assert all((tmp_path / f"node-{i}").is_dir() for i in (1, 2, 3))
    finally:
        _stop(proc)
    assert proc.returncode == 0
    deadline = time.monotonic() + 10
    while any(_listening(s) for s in servers) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(_listening(s) for s in servers), "a node outlived the cluster command"

    again, same_id, _, _ = start_deploy_cluster(tmp_path)
    try:
        assert same_id == cluster_id
    finally:
        _stop(again)


def test_bad_arguments_are_refused_with_a_clear_error(tmp_path: Path) -> None:
    for argv, expected in ((["--nodes", "2"], "invalid choice: 2"), (["--base-port", "70000"], "leaves no room")):
        result = subprocess.run([sys.executable, "-m", "deploy.cluster", "--data-dir", str(tmp_path), *argv],
                                cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert result.returncode == 2 and expected in result.stderr, result.stderr
