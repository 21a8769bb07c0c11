"""Shared fixtures: a real broker process per test (or per module) on free ports."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy.processes.broker import BrokerProcess

# Every JVM the tests start (Spark drivers, executors, standalone masters and workers, also under `make up`) compiles
# with C1 only: a test's JVM lives for seconds to minutes, and C2's compiler threads spent CPU the 2-core CI machine
# lacks. Measured here: the Spark ingest's bad-records test took 29 s of CPU with C2, 19 s without. It changes no
# behaviour; `make up` and the benchmarks keep the JVM's defaults. The JVM notes the option on each one's stderr.
os.environ.setdefault("JDK_JAVA_OPTIONS", "-XX:TieredStopAtLevel=1")


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
