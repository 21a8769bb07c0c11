"""``python -m web users add|list|remove`` as real subprocesses against the test's HBase gateway."""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from contracts.ports import free_port
from deploy.processes.console import ConsoleProcess, password_of, run_cli


def test_add_list_login_remove(console: ConsoleProcess) -> None:
    added = console.cli("users", "add", "carol", "--role", "operator", stdin=password_of("carol") + "\n")
    assert added.returncode == 0, added.stderr
    listed = console.cli("users", "list")
    assert listed.returncode == 0
    rows = [line.split("\t") for line in listed.stdout.splitlines()]
    assert ["carol", "operator"] in [row[:2] for row in rows]
    token = console.login("carol").json()["access_token"]
    headers = {"Authorization": f"Bearer {token}"}
    assert httpx.get(f"{console.url}/api/v1/auth/me", headers=headers).json()["role"] == "operator"
    removed = console.cli("users", "remove", "carol")
    assert removed.returncode == 0, removed.stderr
    # The console sees a removal made elsewhere within its lookup cache's few seconds.
    deadline = time.monotonic() + 10
    while httpx.get(f"{console.url}/api/v1/auth/me", headers=headers).status_code != 401:
        assert time.monotonic() < deadline, "removed user's token still accepted"
        time.sleep(0.2)


def test_bad_arguments_exit_2_with_a_reason(console: ConsoleProcess) -> None:
    exists = console.cli("users", "add", "viewer", "--role", "viewer", stdin="another-password\n")
    assert exists.returncode == 2 and "already exists" in exists.stderr
    short = console.cli("users", "add", "dave", "--role", "viewer", stdin="short\n")
    assert short.returncode == 2 and "at least 8 characters" in short.stderr
    empty = console.cli("users", "add", "dave", "--role", "viewer", stdin="")
    assert empty.returncode == 2 and "password" in empty.stderr
    name = console.cli("users", "add", "da ve", "--role", "viewer", stdin="long-enough-pw\n")
    assert name.returncode == 2 and "username must be" in name.stderr
    role = console.cli("users", "add", "dave", "--role", "root", stdin="long-enough-pw\n")
    assert role.returncode == 2 and "invalid choice" in role.stderr
    no_role = console.cli("users", "add", "dave", stdin="long-enough-pw\n")
    assert no_role.returncode == 2 and "--role" in no_role.stderr
    missing = console.cli("users", "remove", "nobody-here")
    assert missing.returncode == 2 and "no user" in missing.stderr
    assert "dave" not in console.cli("users", "list").stdout


def test_unreachable_hbase_exits_1(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text(f'[hbase]\nhost = "127.0.0.1"\nport = {free_port()}\n')
    result = run_cli(config, "users", "list")
    assert result.returncode == 1 and "cannot reach HBase" in result.stderr
