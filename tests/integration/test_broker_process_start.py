"""The test harness's broker start: a broker that cannot bind its port must not pass for started because another
process answers there (a cluster test in CI then failed later, obscurely, with one node missing)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from contracts.ports import _ephemeral_low, free_port
from deploy.processes.broker import BrokerProcess


def test_a_broker_whose_port_another_process_holds_fails_to_start(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "broker")
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", broker.port))
        holder.listen()
        with pytest.raises(RuntimeError, match="address already in use"):
            broker.start(timeout=20)
    assert broker.proc is not None and broker.proc.poll() is not None


def test_free_ports_stay_below_the_ephemeral_range() -> None:
    ports = {free_port() for _ in range(20)}
    assert all(port < _ephemeral_low() for port in ports)
