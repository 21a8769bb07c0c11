"""The gateway's /metrics (`--metrics-port`): Thrift calls and their latency per method, with the outcome, as a
happybase client made them."""

from __future__ import annotations

import re
from pathlib import Path

import happybase
import httpx
import pytest
from Hbase_thrift import AlreadyExists

from contracts.ports import free_port
from deploy.processes.gateway import start_gateway


def _value(text: str, name: str, **labels: str) -> float:
    for line in text.splitlines():
        match = re.fullmatch(rf"{name}\{{(.*)\}} (\S+)", line)
        if match and all(f'{key}="{value}"' in match.group(1) for key, value in labels.items()):
            return float(match.group(2))
    return 0.0


def test_calls_are_counted_and_timed_per_method_with_their_outcome(tmp_path: Path) -> None:
    port = free_port()
    gateway = start_gateway(tmp_path / "data", "--metrics-port", str(port))
    try:
        connection = happybase.Connection("127.0.0.1", gateway.port, autoconnect=True)
        connection.create_table("plates", {"d": {}})
        table = connection.table("plates")
        for i in range(3):
            table.put(f"row-{i}".encode(), {b"d:v": b"x"})
        assert table.row(b"row-1") == {b"d:v": b"x"}
        with pytest.raises(AlreadyExists):  # answered, and counted as such
            connection.create_table("plates", {"d": {}})
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        assert _value(text, "hbase_thrift_requests_total", method="mutateRows", outcome="ok") == 3
        assert _value(text, "hbase_thrift_requests_total", method="getRowWithColumns", outcome="ok") + _value(
            text, "hbase_thrift_requests_total", method="getRow", outcome="ok") >= 1
        assert _value(text, "hbase_thrift_requests_total", method="createTable", outcome="already_exists") == 1
        assert _value(text, "hbase_thrift_request_duration_seconds_count", method="mutateRows") == 3
        connection.close()
    finally:
        gateway.kill()
