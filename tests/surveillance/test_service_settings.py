"""The ``[surveillance]`` settings: defaults from the shipped config, and a mistake stops the start naming the key."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from contracts import config as solution
from surveillance.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


def test_shipped_config_gives_the_documented_defaults() -> None:
    settings = Settings.from_config(solution.load())
    assert settings.bootstrap == solution.load().get("bus", "bootstrap_servers", "")
    assert (settings.clone_speed_kmh, settings.allowed_lateness_s, settings.fuzzy) == (200.0, 10.0, True)
    assert settings.topics.surveillance_replies == "surveillance.replies"
    assert settings.metrics_host == "127.0.0.1"  # a Prometheus on another host needs the host's own address


@pytest.mark.parametrize(("line", "key"), [("clone_speed_kmh = -1", "clone_speed_kmh"),
                                           ("batch = 0", "batch"), ("fuzzy = 'yes'", "fuzzy"),
                                           ("metrics_port = 70000", "metrics_port"),
                                           ("metrics_host = 5", "metrics_host")])
def test_bad_settings_name_the_key(tmp_path: Path, line: str, key: str) -> None:
    path = tmp_path / "solution.toml"
    path.write_text(f"[surveillance]\n{line}\n")
    with pytest.raises(ValueError, match=f"surveillance.{key}"):
        Settings.from_config(solution.load(path))
    run = subprocess.run([sys.executable, "-m", "surveillance", "--config", str(path)], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and f"surveillance.{key}" in run.stderr
