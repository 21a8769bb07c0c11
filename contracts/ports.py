"""Free TCP ports for servers, so tests and `make up`'s children run in parallel without clashing.

A port is free when asked but a server binds it later, in another process. Taken from the kernel's ephemeral
range (what binding port 0 gives), it can meanwhile become the local port of some client's outgoing connection,
and the server fails with "address already in use" (a cluster node in CI did). Ports are therefore drawn below
`ip_local_port_range`, where only other tests' servers bind, each drawn at random and checked bindable.
"""

from __future__ import annotations

import random
import socket
import time
from pathlib import Path

_LOWEST = 10_000


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port() -> int:
    high = _ephemeral_low() - 1
    if high - _LOWEST > 1000:
        for _ in range(100):
            port = random.randint(_LOWEST, high)
            if _bindable(port):
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:  # no room below the ephemeral range
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port: int, timeout: float = 15.0, host: str = "127.0.0.1") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listening on {host}:{port} after {timeout}s")
