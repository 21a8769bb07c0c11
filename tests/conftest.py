"""Shared fixtures: a real broker process per test (or per module) on free ports."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy.processes.broker import BrokerProcess


@pytest.fixture(scope="session", autouse=True)
def spark_scratch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Spark's scratch space under pytest's temporary directory, which keeps only the last runs, instead of /tmp: a
    JVM a test kills (a driver, a worker, an executor) leaves its directories behind, and on a cluster they hold the
    packed environment (222 MiB, 650 MiB unpacked). SPARK_LOCAL_DIRS places the block managers' directories and a
    driver's unpacked archives; ``java.io.tmpdir`` (through JDK_JAVA_OPTIONS, which every ``java`` launch reads) the
    temporary directories archives are fetched into."""
    scratch = tmp_path_factory.mktemp("spark-local")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SPARK_LOCAL_DIRS", str(scratch))
        patch.setenv("JDK_JAVA_OPTIONS", f"{os.environ.get('JDK_JAVA_OPTIONS', '')} -Djava.io.tmpdir={scratch}".strip())
        yield


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
