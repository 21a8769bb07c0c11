"""The Prometheus rules `make up` loads (deploy/prometheus/*rules*.yml), judged by Debian's `promtool`: every file
passes `promtool check rules`, every alerting rule has a promtool unit test that sees it fire, and the tests pass;
a rules file with an error fails here, naming it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from deploy.prometheus.scrape import RULES_DIR, rule_files

PROMTOOL = "/usr/bin/promtool"


def promtool(*args: str, cwd: Path = RULES_DIR) -> subprocess.CompletedProcess[str]:
    if shutil.which(PROMTOOL) is None:
        pytest.fail(f"{PROMTOOL} is missing: run `make system-deps` (Debian's prometheus package)")
    return subprocess.run([PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_every_rules_file_passes_promtool_check() -> None:
    files = rule_files()
    assert {p.name for p in files} >= {"bus_rules.yml", "pipeline_rules.yml"}
    result = promtool("check", "rules", *map(str, files))
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_unit_test_that_sees_it_fire_and_the_tests_pass() -> None:
    alerts = {rule["alert"] for path in rule_files() for group in yaml.safe_load(path.read_text())["groups"]
              for rule in group["rules"] if "alert" in rule}
    tests = sorted(RULES_DIR.glob("*rules_test.yml"))
    seen_firing = {case["alertname"] for path in tests for test in yaml.safe_load(path.read_text())["tests"]
                   for case in test.get("alert_rule_test", []) if case.get("exp_alerts")}
    assert alerts - seen_firing == set(), "alerting rules without a unit test that sees them fire"
    result = promtool("test", "rules", *map(str, tests))
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_broken_rules_file_is_named(tmp_path: Path) -> None:
    broken = tmp_path / "broken_rules.yml"
    broken.write_text("groups:\n  - name: x\n    rules:\n      - alert: Nonsense\n        expr: sum(up{) > 0\n")
    result = promtool("check", "rules", str(broken), cwd=tmp_path)
    assert result.returncode != 0 and "broken_rules.yml" in result.stdout + result.stderr
