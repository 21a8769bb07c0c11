"""Fixtures: the gateway as a real process, judged by happybase only.

Each gateway listens on ``--port 0`` and announces the port it got on stdout, so parallel
workers (pytest-xdist) never race for a port, and each has its own temporary data dir. Every
process started here is killed at teardown, whatever the test did.
"""

from __future__ import annotations

import itertools
import os
import re
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import happybase
import pytest

ROOT = Path(__file__).resolve().parents[2]
_names = itertools.count()


@dataclass
class Gateway:
    proc: subprocess.Popen[bytes]
    port: int
    data_dir: Path
    args: tuple[str, ...]
    log_path: Path
    connections: list[happybase.Connection] = field(default_factory=list)

    def connect(self, **kwargs: object) -> happybase.Connection:
        kwargs.setdefault("transport", _arg(self.args, "--transport", "buffered"))
        kwargs.setdefault("protocol", _arg(self.args, "--protocol", "binary"))
        conn = happybase.Connection("127.0.0.1", self.port, **kwargs)  # type: ignore[arg-type]
        self.connections.append(conn)
        return conn

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.alive():
            self.proc.kill()
        self.proc.wait(10)

    def terminate(self, sig: int = signal.SIGTERM, timeout: float = 10) -> int:
        self.proc.send_signal(sig)
        return self.proc.wait(timeout)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def _arg(args: tuple[str, ...], name: str, default: str) -> str:
    return args[args.index(name) + 1] if name in args else default


def start_gateway(data_dir: Path, *args: str, log_dir: Path | None = None, timeout: float = 15) -> Gateway:
    """Start ``python -m deploy.hbase_gateway`` and wait for its "listening" line."""
    log_path = (log_dir or data_dir.parent) / f"gateway-{os.getpid()}-{next(_names)}.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "deploy.hbase_gateway", "--port", "0", "--data-dir", str(data_dir), *args],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=log,
        )
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or proc.poll() is not None:
                proc.kill()
                raise RuntimeError(f"gateway did not start:\n{log_path.read_text(errors='replace')}")
            if sel.select(remaining):
                line = proc.stdout.readline().decode()
                break
    match = re.fullmatch(r"hbase-gateway listening on (\S+):(\d+)", line.strip())
    if not match:
        proc.kill()
        raise RuntimeError(f"unexpected first line {line!r}")
    return Gateway(proc, int(match.group(2)), data_dir, args, log_path)


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
