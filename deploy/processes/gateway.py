"""Run the HBase gateway (`python -m deploy.hbase_gateway`) as a real process, for tests and benchmarks.

The gateway listens on ``--port 0`` and announces the port it got on stdout, so parallel workers (pytest-xdist)
never race for a port; each has its own data dir. Its stderr goes to a log file of its own.
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
from dataclasses import dataclass, field
from pathlib import Path

import happybase

from contracts import processes as child

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
        child.kill(self.proc)

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
        proc = child.spawn(
            [sys.executable, "-m", "deploy.hbase_gateway", "--port", "0", "--data-dir", str(data_dir), *args],
            subprocess.PIPE, stderr=log)
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
