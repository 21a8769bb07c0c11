"""`bus storage info` and `random-uuid` on real directories: what `format` wrote is what `info` finds."""

from __future__ import annotations

import base64
from pathlib import Path

from bus.config.broker import random_cluster_id
from tests.integration._support_tools import bus, ok


def server_properties(tmp_path: Path, *log_dirs: Path) -> Path:
    path = tmp_path / "server.properties"
    path.write_text("process.roles=broker,controller\nnode.id=3\ncontroller.quorum.voters=3@127.0.0.1:9093\n"
                    "listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093\n"
                    f"log.dirs={','.join(map(str, log_dirs))}\n")
    return path


def test_random_uuid_is_a_cluster_id() -> None:
    printed = ok(bus("storage", "random-uuid")).strip()
    assert len(base64.urlsafe_b64decode(printed + "==")) == 16 and printed != random_cluster_id()


def test_info_after_format(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    config = server_properties(tmp_path, one, two)
    cluster_id = random_cluster_id()
    ok(bus("storage", "format", "--config", str(config), "--cluster-id", cluster_id))
    out = ok(bus("storage", "info", "--config", str(config))).splitlines()
    assert out[:4] == ["Found log directories:", f"  {one}", f"  {two}", ""]
    assert out[4].startswith(f"Found metadata: {{cluster.id={cluster_id}, directory.id=")
    assert out[4].endswith(", node.id=3, version=1}")
    assert out[5:] == [""]


def test_info_reports_unformatted_and_missing_dirs(tmp_path: Path) -> None:
    present, missing = tmp_path / "present", tmp_path / "missing"
    present.mkdir()
    result = bus("storage", "info", "-c", str(server_properties(tmp_path, present, missing)))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stdout.splitlines() == ["Found log directory:", f"  {present}", "", "Found problems:",
                                          f"  {missing} does not exist", f"  {present} is not formatted.", ""]


def test_info_reports_directories_of_another_cluster(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    for directory in (one, two):
        config = server_properties(tmp_path, directory)
        ok(bus("storage", "format", "--config", str(config), "--cluster-id", random_cluster_id()))
    result = bus("storage", "info", "--config", str(server_properties(tmp_path, one, two)))
    assert result.returncode == 1
    problems = result.stdout.splitlines()[-2:]
    assert problems[0].startswith(f"  Metadata for {two / 'meta.properties'} was {{cluster.id=")
    assert "but other directories featured {cluster.id=" in problems[0]


def test_info_bad_config(tmp_path: Path) -> None:
    result = bus("storage", "info", "--config", str(tmp_path / "absent.properties"))
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr.startswith(f"Invalid configuration {tmp_path / 'absent.properties'}: ")
    assert len(result.stderr.strip().splitlines()) == 1
    result = bus("storage", "info")
    assert result.returncode == 1 and "--config" in result.stderr
