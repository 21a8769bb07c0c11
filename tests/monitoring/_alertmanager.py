"""A real Alertmanager (Debian's ``prometheus-alertmanager``, installed by ``make system-deps``) on free
ports, without clustering, routing everything to one webhook; and ``amtool`` against it.

A missing binary fails the test (never skips it): the message says to run ``make system-deps``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from contracts.ports import free_port
from contracts.processes import spawn, terminate

ALERTMANAGER = "prometheus-alertmanager"
AMTOOL = "amtool"


def require(binary: str) -> str:
    path = shutil.which(binary) or (f"/usr/bin/{binary}" if Path(f"/usr/bin/{binary}").exists() else None)
    if path is None:
        pytest.fail(f"{binary} is not installed: run `make system-deps` (it installs Debian's prometheus-alertmanager, "
                    f"which provides /usr/bin/{ALERTMANAGER} and /usr/bin/{AMTOOL})", pytrace=False)
    return path


def alertmanager_config(hook_url: str, group_by: tuple[str, ...] = ("alertname", "device_ip")) -> str:
    """Every alert to one webhook, fast timers (a test runs an incident in seconds)."""
    return (
        "route:\n"
        "  receiver: hook\n"
        f"  group_by: [{', '.join(group_by)}]\n"
        "  group_wait: 500ms\n"
        "  group_interval: 1s\n"
        "  repeat_interval: 1h\n"
        "receivers:\n"
        "  - name: hook\n"
        "    webhook_configs:\n"
        f"      - url: {json.dumps(hook_url)}\n"
        "        send_resolved: true\n"
    )


class AlertmanagerProcess:
    """``prometheus-alertmanager`` on ``127.0.0.1:port`` with its own storage; ``stop``/``start`` keep the port."""

    def __init__(self, root: Path, hook_url: str, port: int | None = None) -> None:
        self.binary = require(ALERTMANAGER)
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.config = root / "alertmanager.yml"
        self.config.write_text(alertmanager_config(hook_url))
        self.log_path = root / "alertmanager.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30) -> AlertmanagerProcess:
        self.proc = spawn(
            [self.binary, f"--config.file={self.config}", f"--storage.path={self.root / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--cluster.listen-address=",
             f"--web.external-url={self.url}", "--log.level=info"], self.log_path)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"alertmanager exited {self.proc.returncode}:\n{self.log()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
                    if response.status == 200:
                        return self
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"alertmanager not ready in {timeout} s:\n{self.log()[-3000:]}")

    def stop(self) -> None:
        if self.proc is not None:
            terminate(self.proc, 10)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def alerts(self) -> list[dict[str, Any]]:
        """``GET /api/v2/alerts``: what it holds open (active, silenced, inhibited)."""
        with urllib.request.urlopen(f"{self.url}/api/v2/alerts", timeout=5) as response:
            return json.loads(response.read())

    def amtool(self, *args: str) -> str:
        done = subprocess.run([require(AMTOOL), f"--alertmanager.url={self.url}", *args], capture_output=True,
                              text=True, timeout=30)
        assert done.returncode == 0, f"amtool {' '.join(args)}: {done.stdout}{done.stderr}"
        return done.stdout
