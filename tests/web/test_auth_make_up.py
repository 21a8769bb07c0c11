"""`make up` (``python -m deploy.up --no-pipeline``) starts the console and creates ``admin`` once."""

from __future__ import annotations

import os
import re
import selectors
import ssl
import stat
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import tomli_w
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from contracts import bus_client, s3_credentials
from contracts.config import load as load_config
from deploy.processes.child import spawn
from deploy.processes.ports import free_port

ROOT = Path(__file__).resolve().parents[2]


MAKE_UP_PORTS = ("bus", "controller", "hbase", "s3", "console", "monitor", "surveillance", "dr", "drc", "mm")


def write_config(tmp_path: Path, ports: dict[str, int], bus: str | None = None) -> Path:
    """A solution config of this test's own: every listener on its own free port (`ports`, MAKE_UP_PORTS and
    optionally "drh", the DR site's HBase, "busm" the broker's, "s3m" the object store's and "hbm" the HBase
    gateway's metrics, "prom" Prometheus) and the deployment map in `tmp_path`, so that two make-up tests running
    at once share no port and no file. `bus`: the `[bus] bootstrap_servers` (default the "bus" port)."""
    bootstrap = bus or f"127.0.0.1:{ports['bus']}"
    optional = {"busm": ("bus", "metrics_port"), "s3m": ("object_storage", "metrics_port"),
                "hbm": ("hbase", "metrics_port"),
                "prom": ("prometheus", "port"), "drh": ("dr", "hbase_port")}
    sections: dict[str, dict[str, object]] = {
        "bus": {"bootstrap_servers": bootstrap},
        "hbase": {"host": "127.0.0.1", "port": ports["hbase"]},
        "object_storage": {"endpoint": f"127.0.0.1:{ports['s3']}"},  # keys: make up's DATA/secrets
        "console": {"port": ports["console"]},
        "monitoring": {"metrics_port": ports["monitor"]},
        "surveillance": {"metrics_port": ports["surveillance"]},
        "map": {"path": str(tmp_path / "deployment_map.json")},
        "dr": {"bootstrap_servers": f"127.0.0.1:{ports['dr']}", "controller_port": ports["drc"],
               "mirror_metrics_port": ports["mm"]},
        "prometheus": {},
    }
    for name, (section, key) in optional.items():
        if name in ports:
            sections[section][key] = ports[name]
    config = tmp_path / "solution.toml"
    config.write_text(tomli_w.dumps({name: values for name, values in sections.items() if values}))
    return config


def start_up(config: Path, data_dir: Path, ports: dict[str, int], *flags: str, pipeline: bool = False,
             env: dict[str, str] | None = None, timeout: float = 120) -> tuple[subprocess.Popen[bytes], str]:
    """Start deploy.up (with `flags` added; `--no-pipeline` unless `pipeline`; `env` added to the environment) and
    return it with everything it printed up to its "Press Ctrl-C" line.

    The pipe is read with os.read: readline() on the buffered stream would keep lines that arrived in one
    write in its buffer, where select() cannot see them, and wait for output that never comes.
    """
    proc = spawn(
        [sys.executable, "-m", "deploy.up", "--config", str(config), "--data-dir", str(data_dir),
         *([] if pipeline else ["--no-pipeline"]),
         "--kafka-port", str(ports["bus"]), "--controller-port", str(ports["controller"]),
         "--hbase-port", str(ports["hbase"]),
         "--console-port", str(ports["console"]), *flags],
        subprocess.PIPE, env={**os.environ, **(env or {})})
    assert proc.stdout is not None
    output = ""
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        while "Press Ctrl-C" not in output:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                pytest.fail(f"make up did not come up:\n{output}")
            if selector.select(1):
                output += os.read(proc.stdout.fileno(), 65536).decode(errors="replace")
    return proc, output


def bus_settings(data_dir: Path, principal: str = "admin", section: str = bus_client.SECTION) -> dict[str, str]:
    """librdkafka settings for `principal` on make up's secured bus (from DATA/solution.toml and its properties);
    ``section="dr"``: on the DR site's bus."""
    return bus_client.librdkafka(load_config(data_dir / "solution.toml"), principal, section=section)


def console_client(data_dir: Path, port: int, **kwargs: object) -> httpx.Client:
    """An HTTPS client of make up's console, trusting make up's CA (DATA/secrets/ca.pem)."""
    trust = ssl.create_default_context(cafile=str(data_dir / "secrets" / "ca.pem"))
    return httpx.Client(base_url=f"https://127.0.0.1:{port}", verify=trust, timeout=30, **kwargs)  # type: ignore[arg-type]


def down(data_dir: Path, proc: subprocess.Popen[bytes], timeout: float = 90) -> str:
    """`make down`, and what it printed; we reap `make up` meanwhile (an unreaped child stays a zombie that `--down`
    sees alive)."""
    stopper = spawn([sys.executable, "-m", "deploy.up", "--data-dir", str(data_dir), "--down"], subprocess.PIPE)
    assert proc.wait(timeout) == 0
    said = stopper.communicate(timeout=30)[0].decode(errors="replace")
    assert stopper.returncode == 0, said
    return said


def monitor_metrics(port: int, timeout: float = 60) -> str:
    """The monitor's /metrics once it serves them (it starts after the bus and HBase answer); "" if it never does."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        except httpx.HTTPError:
            if time.monotonic() > deadline:
                return ""
            time.sleep(0.5)


def _object_store_keys_are_its_own_and_nowhere_else(data_dir: Path, output: str) -> dict[str, object]:
    """Every component's key is made in DATA/secrets (0600, in a 0700 directory); no secret is printed, on any
    process's command line or in any log."""
    secrets_dir = data_dir / "secrets"
    assert str(secrets_dir) in output and stat.S_IMODE(secrets_dir.stat().st_mode) == 0o700
    keys = {name: s3_credentials.read_file(secrets_dir / s3_credentials.file_name(name))
            for name in s3_credentials.RIGHTS}  # read_file refuses a file open to others
    _nowhere_else(data_dir, output, [key.secret_key for key in keys.values()])
    return dict(keys)


def _nowhere_else(data_dir: Path, output: str, secrets: list[str]) -> None:
    """None of `secrets` is in make up's output, in a tracked file, on any process's command line or in any log."""
    tracked = subprocess.run(["git", "grep", "-l", "-F", *(arg for secret in secrets for arg in ("-e", secret))],
                             cwd=ROOT, capture_output=True, text=True)
    assert tracked.returncode == 1 and not tracked.stdout, tracked  # 1: no match
    command_lines = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True).stdout
    logs = "".join(path.read_text(errors="replace") for path in data_dir.rglob("*.log"))
    for secret in secrets:
        assert secret not in output and secret not in command_lines and secret not in logs


def _bus_is_secured(data_dir: Path, output: str) -> list[str]:
    """At each site (the primary's bus, then the DR site's): each principal has its owner-only properties file; the
    bus refuses PLAINTEXT and a wrong password, takes the admin's; its ACLs are the table's in the site's role.
    Returns the bus passwords of both sites (to look for them where they must not be)."""
    assert (data_dir / "secrets" / "ca.pem").exists() and "SASL_SSL" in output, output
    passwords = []
    for section in (bus_client.SECTION, bus_client.DR):
        for principal in bus_client.PRINCIPALS:
            settings = bus_settings(data_dir, principal, section)  # read_properties refuses a file open to others
            assert settings["security.protocol"] == "SASL_SSL" and settings["sasl.username"] == principal
            assert settings["ssl.ca.location"] == str(data_dir / "secrets" / "ca.pem")  # one CA for both sites
            passwords.append(settings["sasl.password"])
        admin = bus_settings(data_dir, section=section)
        assert AdminClient(admin).list_topics(timeout=30).topics is not None
        refused = [{"bootstrap.servers": admin["bootstrap.servers"]},  # PLAINTEXT on a SASL_SSL listener
                   {**admin, "sasl.password": "guessed"}]
        for settings in refused:
            with pytest.raises(KafkaException):
                AdminClient({**settings, "log_level": 0}).list_topics(timeout=5)
    assert len(set(passwords)) == len(passwords), "every principal of each site has a password of its own"
    for role, present, absent in (("active", "User:simulator", "User:dr-loaders"),
                                  ("standby", "User:dr-loaders", "mm2-offset-syncs.")):
        shown = subprocess.run([sys.executable, "-m", "deploy.acls", "--show", "--role", role, "--data-dir",
                                str(data_dir)], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True).stdout
        assert "User:console" in shown and present in shown and absent not in shown, shown
        assert f"ACLs of the {role} site:" in output, output
    return passwords


@pytest.mark.slow
def test_make_up_starts_the_console_with_an_admin(tmp_path: Path) -> None:
    ports = {name: free_port() for name in MAKE_UP_PORTS}
    config = write_config(tmp_path, ports)
    data_dir = tmp_path / "data"
    proc, output = start_up(config, data_dir, ports)
    try:
        url = f"https://127.0.0.1:{ports['console']}"
        password_file = data_dir / "console" / "admin_password"
        assert url in output and str(password_file) in output, output
        assert password_file.stat().st_mode & 0o777 == 0o600
        password = password_file.read_text().strip()
        with console_client(data_dir, ports["console"]) as console:
            login = console.post("/api/v1/auth/token", data={"username": "admin", "password": password})
            assert login.status_code == 200, login.text
            assert "strict-transport-security" in login.headers
        with pytest.raises(httpx.HTTPError):  # nothing answers in clear text
            httpx.get(f"http://127.0.0.1:{ports['console']}/api/v1/health", timeout=5)
        assert "monitor" in output, output
        assert "monitor_" in monitor_metrics(ports["monitor"]), (data_dir / "monitor.log").read_text()
        keys = _object_store_keys_are_its_own_and_nowhere_else(data_dir, output)
        bus_passwords = _bus_is_secured(data_dir, output)
        _nowhere_else(data_dir, output, bus_passwords)
    finally:
        down(data_dir, proc)
    with pytest.raises(httpx.ConnectError):  # make down stopped the monitor too
        httpx.get(f"http://127.0.0.1:{ports['monitor']}/metrics", timeout=5)
    assert not re.search(r"console\s+.*(did not start|not created)", output)

    # A second start keeps the admin and its password file, every object-store key and every bus password.
    proc, output = start_up(config, data_dir, ports)
    try:
        assert password_file.read_text().strip() == password
        assert s3_credentials.ensure_files(data_dir / "secrets") == keys
        assert _bus_is_secured(data_dir, output) == bus_passwords
        with console_client(data_dir, ports["console"]) as console:
            login = console.post("/api/v1/auth/token", data={"username": "admin", "password": password})
            assert login.status_code == 200
    finally:
        down(data_dir, proc)
