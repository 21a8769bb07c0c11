"""`python -m dr_mirror switchover`'s refusals that need no running site: bad arguments, a data directory that is not
make up's, a second switchover while one holds the lock, a new site whose bus does not answer. Each says why and
leaves the active-site record as it was."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from pathlib import Path

import pytest

from contracts import active_site
from contracts.ports import free_port
from contracts.processes import ROOT
from dr_mirror.switchover import exclusive

NOW = dt.datetime(2026, 12, 1, 8, 0, tzinfo=dt.UTC)


def switchover(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dr_mirror", "switchover", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """A make up data directory whose two buses are not running (nothing listens on their ports)."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "solution.toml").write_text(f'[bus]\nbootstrap_servers = "127.0.0.1:{free_port()}"\n'
                                        f'[dr]\nbootstrap_servers = "127.0.0.1:{free_port()}"\n'
                                        f'mirror_metrics_port = {free_port()}\n')
    active_site.write(data, active_site.ActiveSite("primary", NOW, "make up"))
    return data


@pytest.mark.parametrize("args, said", [
    ([], "the following arguments are required: --to"),
    (["--to", "moon"], "invalid choice: 'moon'"),
    (["--to", "dr", "--max-lag", "-1"], "--max-lag must be at least 0"),
    (["--to", "dr", "--drain-timeout", "0"], "--drain-timeout above 0"),
])
def test_bad_arguments_exit_2_naming_them(data_dir: Path, args: list[str], said: str) -> None:
    answer = switchover(*args, "--data-dir", str(data_dir))
    assert answer.returncode == 2 and said in answer.stderr, answer.stderr
    assert active_site.read(data_dir) == active_site.ActiveSite("primary", NOW, "make up")


def test_a_directory_without_a_solution_config_is_not_a_make_up_data_directory(tmp_path: Path) -> None:
    answer = switchover("--to", "dr", "--data-dir", str(tmp_path))
    assert answer.returncode == 2 and "solution.toml not found" in answer.stderr, answer.stderr


def test_a_damaged_record_exits_2(data_dir: Path) -> None:
    active_site.path(data_dir).write_text('{"active": "moon"')
    answer = switchover("--to", "dr", "--data-dir", str(data_dir))
    assert answer.returncode == 2 and "is not an active-site record" in answer.stderr, answer.stderr


def test_a_second_switchover_is_told_which_process_holds_the_lock(data_dir: Path) -> None:
    with exclusive(data_dir):
        answer = switchover("--to", "dr", "--data-dir", str(data_dir))
    assert answer.returncode == 1, answer.stderr
    assert "another switchover is under way (process " in answer.stderr and "nothing changed" in answer.stderr
    assert active_site.read(data_dir) == active_site.ActiveSite("primary", NOW, "make up")


def test_a_new_site_whose_bus_does_not_answer_changes_nothing(data_dir: Path) -> None:
    answer = switchover("--to", "dr", "--data-dir", str(data_dir), "--reason", "drill")
    assert answer.returncode == 1, answer.stderr
    assert "the dr site's bus does not answer" in answer.stderr and "nothing changed" in answer.stderr
    assert active_site.read(data_dir) == active_site.ActiveSite("primary", NOW, "make up")


def test_asking_for_the_site_already_active_changes_nothing(data_dir: Path) -> None:
    answer = switchover("--to", "primary", "--data-dir", str(data_dir))
    assert answer.returncode == 0, answer.stderr
    assert answer.stdout.startswith("already active: primary"), answer.stdout
    assert active_site.read(data_dir) == active_site.ActiveSite("primary", NOW, "make up")
