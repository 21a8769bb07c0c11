"""Fixtures: the gateway as a real process (`deploy.processes.gateway`), judged by happybase only.

Each gateway listens on ``--port 0`` and announces the port it got on stdout, so parallel
workers (pytest-xdist) never race for a port, and each has its own temporary data dir. Every
process started here is killed at teardown, whatever the test did.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import happybase
import pytest

from deploy.processes.gateway import Gateway, start_gateway

_names = itertools.count()


@pytest.fixture(scope="session")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """One gateway per test worker, shared by tests that each use their own tables."""
    gw = start_gateway(tmp_path_factory.mktemp("hbase-shared") / "data")
    yield gw
    gw.kill()


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Callable[..., Gateway]]:
    """Start private gateways (for restarts, kills, odd options); all are killed at teardown."""
    started: list[Gateway] = []

    def _spawn(*args: str, data_dir: Path | None = None) -> Gateway:
        gw = start_gateway(data_dir or tmp_path / "data", *args, log_dir=tmp_path)
        started.append(gw)
        return gw

    yield _spawn
    for gw in started:
        gw.kill()


@pytest.fixture
def conn(gateway: Gateway) -> Iterator[happybase.Connection]:
    c = gateway.connect()
    yield c
    c.close()


def unique_name(prefix: str = "t") -> str:
    return f"{prefix}_{os.getpid()}_{next(_names)}"


@pytest.fixture
def table(conn: happybase.Connection) -> Iterator[happybase.Table]:
    """A fresh table: family ``cf`` keeps 3 versions (the default), ``cg`` keeps 1."""
    name = unique_name()
    conn.create_table(name, {"cf": {}, "cg": {"max_versions": 1}})
    yield conn.table(name)
    conn.delete_table(name, disable=True)
