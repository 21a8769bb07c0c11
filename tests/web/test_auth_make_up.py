"""`make up` (``python -m deploy.up --no-pipeline``) starts the console and creates ``admin`` once."""

from __future__ import annotations

import re
import stat
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from contracts import bus_client, s3_credentials
from contracts.ports import free_port
from deploy.processes.make_up import MAKE_UP_PORTS, bus_settings, console_client, down, start_up, write_config

ROOT = Path(__file__).resolve().parents[2]


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
    for role, site, present, absent in (("active", "primary", "User:simulator", "User:dr-loaders"),
                                        ("standby", "dr", "User:dr-loaders", "mm2-offset-syncs.")):
        shown = subprocess.run([sys.executable, "-m", "deploy.acls", "--show", "--role", role, "--data-dir",
                                str(data_dir)], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True).stdout
        assert "User:console" in shown and present in shown and absent not in shown, shown
        assert f"ACLs of the {site} site, {role}:" in output, output
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
