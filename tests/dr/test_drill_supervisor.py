"""The drill's supervisor over real child processes: what exits while watched is restarted (a bounded number of
times, each counted), what the scenario kills after unwatching stays dead; and the drill's small report helpers."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from dr_mirror.drill.report import markdown
from dr_mirror.drill.sites import Child, with_task_retries
from dr_mirror.drill.supervisor import Supervisor

SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]


def _until(condition: Callable[[], bool], timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


@pytest.fixture
def children() -> Iterator[list[Child]]:
    started: list[Child] = []
    yield started
    for child in started:
        child.kill()


@pytest.fixture
def restarted() -> list[tuple[str, int]]:
    """What the supervisor told the drill: (process, its restart count) per restart."""
    return []


@pytest.fixture
def supervisor(restarted: list[tuple[str, int]]) -> Iterator[Supervisor]:
    sup = Supervisor(limit=2, interval=0.05, on_restart=lambda name, n: restarted.append((name, n)))
    sup.start()
    yield sup
    sup.stopping.set()
    sup.join(5)


def _child(tmp_path: Path, children: list[Child], args: list[str]) -> Child:
    child = Child(args, tmp_path / "child.log").start()
    children.append(child)
    return child


def _exited(child: Child) -> Callable[[], int | None]:
    return lambda: None if child.proc is None else child.proc.poll()


def test_a_process_that_keeps_exiting_is_restarted_up_to_the_limit_then_given_up(
        tmp_path: Path, children: list[Child], supervisor: Supervisor, restarted: list[tuple[str, int]]) -> None:
    child = _child(tmp_path, children, [sys.executable, "-c", "print('run'); raise SystemExit(3)"])
    supervisor.watch("job", _exited(child), child.start)
    _until(lambda: len(supervisor.history) == 3)
    time.sleep(0.3)  # given up: no further restart
    assert [h["exit_status"] for h in supervisor.history] == [3, 3, 3]
    assert [h["restarted"] for h in supervisor.history] == [True, True, False]
    assert supervisor.summary() == {"restarts": {"job": 2}, "gave_up_on": ["job"]}
    assert restarted == [("job", 1), ("job", 2)]
    assert (tmp_path / "child.log").read_text().split() == ["run"] * 3  # it really ran three times


def test_a_watched_process_killed_is_restarted_an_unwatched_one_stays_dead(
        tmp_path: Path, children: list[Child], supervisor: Supervisor) -> None:
    kept = _child(tmp_path, children, SLEEPER)
    lost = _child(tmp_path, children, SLEEPER)
    supervisor.watch("kept", _exited(kept), kept.start)
    supervisor.watch("lost", _exited(lost), lost.start)
    first = kept.proc
    assert first is not None
    kept.kill()  # an accident: the drill still needs it
    _until(lambda: kept.proc is not first and kept.proc is not None and kept.proc.poll() is None)
    supervisor.unwatch("lost")  # the scenario's deliberate kill
    lost.kill()
    time.sleep(0.5)
    assert lost.proc is not None and lost.proc.poll() == -9
    assert supervisor.summary() == {"restarts": {"kept": 1}, "gave_up_on": []}


def test_drill_ingest_jobs_retry_failed_tasks() -> None:
    assert with_task_retries("local[2]") == "local[2,4]"
    assert with_task_retries("local[*]") == "local[*,4]"
    assert with_task_retries("local[2,8]") == "local[2,8]"  # the config already chose
    assert with_task_retries("spark://host:7077") == "spark://host:7077"


def test_report_table_lists_restarts_per_process() -> None:
    text = markdown({"scenario": "primary-loss", "restarts": {"dr ingest": 1, "mirror primary->dr": 2},
                     "gave_up_on": [], "rpo_records": 0})
    assert "| restarts | dr ingest: 1, mirror primary->dr: 2 |" in text
    assert "| gave_up_on | none |" in text and "| rpo_records | 0 |" in text
