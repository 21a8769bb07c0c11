"""Console fixtures: a real broker, HBase gateway and ``python -m web`` subprocess, users of each role.

``console`` is one console per test session (with its broker and gateway), users ``viewer``,
``operator`` and ``admin`` already created through the real ``users add`` CLI; tests that change
shared state use their own names. ``make_console(**console_keys)`` starts more consoles on the same
backends (and so the same users) with other ``[console]`` settings, e.g. a short ``token_ttl_s``.

    def test_x(console):
        r = console.client("viewer").get("/api/v1/auth/me")   # bearer token of that role
        r = console.client(None).get(...)                      # no credentials
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from deploy.processes.broker import BrokerProcess
from deploy.processes.console import Backing, ConsoleProcess, password_of, start_console
from deploy.processes.gateway import start_gateway
from ingest.city import build_city

ROLES = ("viewer", "operator", "admin")
MAP_SEED, MAP_CHECKPOINTS = 7, 12
"""The city of the consoles' deployment map (``ingest.city.build_city``)."""


@pytest.fixture(scope="session")
def console_backing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backing]:
    root = tmp_path_factory.mktemp("console")
    build_city(MAP_SEED, MAP_CHECKPOINTS).save(root / "deployment_map.json")  # what the simulator writes at start
    broker = BrokerProcess(root / "broker").start()
    try:
        gateway = start_gateway(root / "hbase", log_dir=root)
    except BaseException:
        broker.stop()
        raise
    try:
        yield Backing(broker, gateway, root)
    finally:
        gateway.kill()
        broker.stop()


@pytest.fixture(scope="session")
def console(console_backing: Backing) -> Iterator[ConsoleProcess]:
    """One console for the session, with users ``viewer``, ``operator``, ``admin`` made by the real CLI."""
    proc = start_console(console_backing)
    try:
        for role in ROLES:
            result = proc.cli("users", "add", role, "--role", role, stdin=password_of(role) + "\n")
            assert result.returncode == 0, result.stderr
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def make_console(console: ConsoleProcess) -> Iterator[Callable[..., ConsoleProcess]]:
    """More consoles on the session's backends (same users) with other ``[console]`` keys; stopped at teardown."""
    started: list[ConsoleProcess] = []

    def factory(**console_keys: Any) -> ConsoleProcess:
        proc = start_console(console.backing, **console_keys)
        started.append(proc)
        return proc

    yield factory
    for proc in started:
        proc.stop()
