"""How long `make up` takes to come up: the first start (which makes the CA, the certificates, every principal's
password and object-store key, and applies the ACLs) and a second start on the same data directory (which reads
them back), from the command to its "Press Ctrl-C" line.

The whole solution as `make up` starts it (servers, console, monitor, mirror, simulator, the Spark jobs launched,
the surveillance service and loader), on its own free ports and a fresh data directory; `make down` after each
start. ``--repo`` runs another checkout's `deploy.up` with the same config (e.g. a `git worktree` of the commit
before the bus was secured), which gives the before/after pair.

    .venv/bin/python benchmarks/make_up_startup.py [--repo PATH] [--starts 2]
"""

from __future__ import annotations

import argparse
import os
import selectors
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from contracts.ports import free_port
from contracts.processes import spawn
from deploy.processes.make_up import MAKE_UP_PORTS, write_config

ROOT = Path(__file__).resolve().parents[1]


def start(repo: Path, config: Path, data_dir: Path, ports: dict[str, int], timeout: float = 600) -> float:
    """Seconds from `python -m deploy.up` to its "Press Ctrl-C" line; then `make down`."""
    began = time.monotonic()
    proc = spawn(
        [sys.executable, "-m", "deploy.up", "--config", str(config), "--data-dir", str(data_dir),
         "--kafka-port", str(ports["bus"]), "--controller-port", str(ports["controller"]),
         "--hbase-port", str(ports["hbase"]), "--console-port", str(ports["console"])],
        subprocess.PIPE, cwd=repo)
    assert proc.stdout is not None
    output = b""
    try:
        with selectors.DefaultSelector() as selector:
            selector.register(proc.stdout, selectors.EVENT_READ)
            while b"Press Ctrl-C" not in output:
                if proc.poll() is not None or time.monotonic() - began > timeout:
                    raise RuntimeError(f"make up did not come up:\n{output.decode(errors='replace')}")
                if selector.select(1):
                    output += os.read(proc.stdout.fileno(), 65536)
        return time.monotonic() - began
    finally:  # make down, reaping make up meanwhile (an unreaped child is a zombie that --down sees alive)
        stopper = spawn([sys.executable, "-m", "deploy.up", "--data-dir", str(data_dir), "--down"],
                        subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=repo)
        proc.wait(400)
        stopper.wait(60)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, default=ROOT, help="the checkout whose make up is timed")
    parser.add_argument("--starts", type=int, default=2, help="starts on one data directory (the first makes it)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="make-up-startup-") as tmp:
        ports = {name: free_port() for name in MAKE_UP_PORTS}
        config = write_config(Path(tmp), ports)
        data_dir = Path(tmp) / "data"
        for n in range(1, args.starts + 1):
            seconds = start(args.repo.resolve(), config, data_dir, ports)
            print(f"make up start {n} ({'first: makes the secrets' if n == 1 else 'secrets read back'}) "
                  f"[{args.repo.resolve()}]: {seconds:.1f} s to 'Press Ctrl-C'", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
