"""Shared fixtures: a real broker process per test (or per module) on free ports."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy.processes.broker import BrokerProcess


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path / "data").start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for a module whose tests use distinct topics (faster than one per test)."""
    proc = BrokerProcess(tmp_path_factory.mktemp("broker") / "data").start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def make_broker(tmp_path: Path) -> Iterator:
    """Factory for tests that need overrides or several brokers; all are stopped afterwards."""
    started: list[BrokerProcess] = []

    def factory(overrides: dict[str, str] | None = None, name: str = "data") -> BrokerProcess:
        proc = BrokerProcess(tmp_path / name, overrides).start()
        started.append(proc)
        return proc

    yield factory
    for proc in started:
        proc.stop()
