"""Run the console (`python -m web`) as a real process on a test's broker and HBase gateway, for tests and
benchmarks: `start_console(backing, **console_keys)` writes its config and waits until it answers.

`ConsoleProcess` also talks to it as its users do: a bearer token per user (each made with `password_of`'s
password), shared httpx clients, the audit trail.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from contracts import processes as child
from contracts.ports import free_port
from contracts.processes import ROOT
from deploy.processes.broker import BrokerProcess
from deploy.processes.gateway import Gateway

_names = itertools.count()


def password_of(username: str) -> str:
    """The password the fixtures give every user they create."""
    return f"{username}-secret-pw"


@dataclass
class Backing:
    """The processes a console talks to."""

    broker: BrokerProcess
    gateway: Gateway
    root: Path


def write_config(path: Path, backing: Backing, port: int, data_dir: Path, s3: tuple[str, str, str] | None = None,
                 topics: dict[str, str] | None = None, site: dict[str, Any] | None = None, **console: Any) -> Path:
    """A solution config naming the test's broker and gateway; ``console`` adds/overrides ``[console]`` keys.

    ``s3`` is a real object store's (endpoint, access key, secret key); without it the console's points
    at a port nothing listens on (its pages then show the object store as down). ``topics`` renames
    topics (``[topics]``), for a test whose records must not reach the other tests' consoles. ``site`` is a
    ``[site]`` section (``name``, ``record``, ``consoles``: the console at one site of two, `web/site.py`).
    """
    endpoint, access_key, secret_key = s3 or (f"127.0.0.1:{free_port()}", "k", "s")
    keys = {"host": "127.0.0.1", "port": port, "url": f"http://127.0.0.1:{port}", "data_dir": str(data_dir),
            **console}
    lines = [
        "[bus]", f'bootstrap_servers = "{backing.broker.bootstrap}"',
        "[hbase]", 'host = "127.0.0.1"', f"port = {backing.gateway.port}",
        "[object_storage]", f'endpoint = "{endpoint}"', f'access_key = "{access_key}"', f'secret_key = "{secret_key}"',
        "[map]", f'path = "{backing.root / "deployment_map.json"}"',
        "[console]", *(f"{key} = {_toml(value)}" for key, value in keys.items()),
        *(["[topics]", *(f"{key} = {_toml(value)}" for key, value in topics.items())] if topics else []),
        *(["[site]", *(f"{key} = {_toml(value)}" for key, value in site.items())] if site else []),
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def _toml(value: Any) -> str:
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{key} = {_toml(item)}" for key, item in value.items()) + " }"
    if isinstance(value, str | Path):
        return f'"{value}"'
    return str(value).lower() if isinstance(value, bool) else str(value)


def run_cli(config: Path, *args: str, stdin: str = "", timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``python -m web --config CONFIG ARGS...`` as a real subprocess."""
    return subprocess.run([sys.executable, "-m", "web", "--config", str(config), *args], cwd=ROOT, input=stdin,
                          capture_output=True, text=True, timeout=timeout)


@dataclass
class ConsoleProcess:
    proc: subprocess.Popen[bytes]
    port: int
    config: Path
    data_dir: Path
    log_path: Path
    backing: Backing
    _tokens: dict[str, str] = field(default_factory=dict)
    _clients: list[httpx.Client] = field(default_factory=list)
    _shared: dict[str | None, httpx.Client] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def map_path(self) -> Path:
        return self.backing.root / "deployment_map.json"

    def cli(self, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        return run_cli(self.config, *args, stdin=stdin)

    def login(self, username: str, password: str | None = None) -> httpx.Response:
        with httpx.Client(base_url=self.url, timeout=30) as client:
            return client.post("/api/v1/auth/token",
                               data={"username": username, "password": password or password_of(username)})

    def token(self, username: str) -> str:
        if username not in self._tokens:
            response = self.login(username)
            assert response.status_code == 200, response.text
            self._tokens[username] = response.json()["access_token"]
        return self._tokens[username]

    def client(self, username: str | None, **kwargs: Any) -> httpx.Client:
        """An httpx client on the console, with ``username``'s bearer token (None: no credentials).

        Without ``kwargs`` the client is shared with every other such call for that user.
        """
        shared = not kwargs
        if shared and username in self._shared:
            return self._shared[username]
        headers = {"Authorization": f"Bearer {self.token(username)}"} if username else {}
        client = httpx.Client(base_url=self.url, headers=headers, timeout=kwargs.pop("timeout", 30), **kwargs)
        self._clients.append(client)
        if shared:
            self._shared[username] = client
        return client

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def audit(self, until: Callable[[list[dict[str, Any]]], bool] = bool, timeout: float = 20,
              **filters: str) -> list[dict[str, Any]]:
        """The audit entries matching ``filters`` (newest first) once ``until`` holds for them: events reach the
        audit page through the bus and the audit loader, a moment after the request that recorded them."""
        deadline = time.monotonic() + timeout
        while True:
            response = self.client("admin").get("/api/v1/audit", params={"limit": 500, **filters})
            assert response.status_code == 200, response.text
            entries: list[dict[str, Any]] = response.json()["items"]
            if until(entries):
                return entries
            assert time.monotonic() < deadline, f"audit entries for {filters} still {entries}"
            time.sleep(0.2)

    def stop(self) -> None:
        for client in self._clients:
            client.close()
        child.terminate(self.proc, 10)


def start_console(backing: Backing, timeout: float = 60, s3: tuple[str, str, str] | None = None,
                  **console: Any) -> ConsoleProcess:
    """Write a config, start ``python -m web`` and wait until ``/api/v1/health`` answers."""
    n = next(_names)
    port = console.pop("port", None) or free_port()  # a port of the caller's: a URL another console's config names
    data_dir = backing.root / f"console-{n}"
    config = write_config(backing.root / f"console-{n}.toml", backing, port, data_dir, s3, **console)
    log_path = backing.root / f"console-{n}.log"
    with open(log_path, "wb") as log:
        proc = child.spawn([sys.executable, "-m", "web", "--config", str(config)], log)
    console_process = ConsoleProcess(proc, port, config, data_dir, log_path, backing)
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None or time.monotonic() > deadline:
            console_process.stop()
            raise RuntimeError(f"console did not start:\n{log_path.read_text(errors='replace')[-4000:]}")
        try:
            if httpx.get(f"{console_process.url}/api/v1/health", timeout=10).status_code == 200:
                return console_process
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
