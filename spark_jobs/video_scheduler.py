"""The video ingest job's command side: tasks queued, launched as batch jobs (at most N at once), retried,
cancelled, and taken over after a restart.

Its memory is the bus and the task table, not the process: every decision is published as a
``video.status`` record (queued, running, failed, cancelled; the batch job itself publishes progress,
done and a bad video's failure), those records are folded back in as they are read (:meth:`observe`),
and a restarted job starts from the task rows the loader wrote (:meth:`adopt`). So a task id seen
before never runs twice, whichever process saw it. Batch jobs run in their own process groups and
outlive a killed ingest job: each one's pid is kept in a file under ``jobs_dir``, and a restart kills
what the files name before re-launching (the re-run writes the same keys, so it is harmless).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from contracts.records import parse_time
from contracts.video import (
    ANALYZE,
    CANCELLED,
    FAILED,
    QUEUED,
    RUNNING,
    TERMINAL,
    CommandError,
    VideoCommand,
    validate_command,
)
from spark_jobs.task_publisher import TaskPublisher
from spark_jobs.video_synopsis import EXIT_BAD_VIDEO


class Job(Protocol):
    """A launched batch job (:class:`spark_jobs.launch.SparkJob`)."""

    @property
    def pid(self) -> int: ...

    def poll(self) -> int | None: ...

    def kill(self) -> None: ...


Launcher = Callable[[VideoCommand, int], Job]
"""Starts the batch job for a command's given attempt (1-based)."""

MAX_REASON = 1000
"""Characters of a refused command's reason kept in its ``failed`` status (see :meth:`Scheduler.reject`)."""


@dataclass
class Task:
    command: VideoCommand
    attempt: int = 0
    queued_at: float = 0.0
    job: Job | None = None
    cancelled_by: str = ""


def command_fields(command: VideoCommand) -> dict[str, Any]:
    """What a ``queued`` record carries, so the task row (and a restarted job) knows the command."""
    return {k: v for k, v in command.record().items() if k not in ("task_id", "action")}


class Scheduler:
    def __init__(self, publisher: TaskPublisher, launcher: Launcher, jobs_dir: Path, max_concurrent: int,
                 max_attempts: int) -> None:
        if max_concurrent < 1 or max_attempts < 1:
            raise ValueError("max_concurrent and max_attempts must be at least 1")
        self.publisher = publisher
        self.launcher = launcher
        self.jobs_dir = jobs_dir
        self.max_concurrent = max_concurrent
        self.max_attempts = max_attempts
        self.queue: deque[Task] = deque()
        self.running: dict[str, Task] = {}
        self.states: dict[str, str] = {}
        """Last known state of every task seen (terminal ones included: they never run again)."""
        self.launched = 0
        self.peak_running = 0
        self._lock = threading.RLock()
        self._held = True  # no launch before the first batch has replayed the bus (see release)
        jobs_dir.mkdir(parents=True, exist_ok=True)

    # -- what was read from the bus or the table --------------------------------------------------
    def knows(self, task_id: str) -> bool:
        with self._lock:
            return task_id in self.states

    def observe(self, status: Mapping[str, Any]) -> None:
        """Fold a ``video.status`` record read from the bus (ours, a batch job's, or from before a restart).

        A ``queued`` record of a task not seen yet is taken over (ours, from before a restart, carry the command).
        One without a usable command raises :class:`CommandError` and changes nothing: any producer may write
        one (a batch job run by hand announces its own task), and such a task is not this job's to run."""
        with self._lock:
            task_id, state = status["task_id"], status["state"]
            if self.states.get(task_id) in TERMINAL:
                return
            if state in TERMINAL:
                self.states[task_id] = state
                self._drop_queued(task_id)
                return
            if task_id not in self.states and state == QUEUED:
                self._adopt_record({**status, "task_id": task_id, "action": ANALYZE})
            else:
                self.states.setdefault(task_id, state)

    def adopt(self, row: Mapping[str, str]) -> None:
        """Take over an unfinished task from its table row (a restarted job): it is queued again. A row
        without a usable command (see :meth:`observe`) raises :class:`CommandError` and changes nothing."""
        with self._lock:
            if row.get("task_id") not in self.states:
                try:
                    options = json.loads(row.get("options") or "{}")
                except ValueError as exc:
                    raise CommandError("options", f"not JSON: {exc}") from None
                self._adopt_record({**row, "options": options, "action": ANALYZE})

    def _adopt_record(self, record: Mapping[str, Any]) -> None:
        """Queue the task a record describes; validates everything before changing anything."""
        fields = ("task_id", "action", "video_url", "camera_id", "requested_by", "requested_at", "options")
        command = validate_command({k: record.get(k) for k in fields})
        try:
            attempt = int(record.get("attempt") or 0)
        except ValueError:  # a row written before the loader checked statuses may hold anything
            raise CommandError("attempt", f"not a whole number: {record.get('attempt')!r:.60}") from None
        self.states[command.task_id] = QUEUED
        # A queued task's attempt is the one that died (the next is one more); a running one is re-run as is.
        state = record.get("state", record.get("status"))
        self.queue.append(Task(command, attempt=attempt if state == QUEUED else max(0, attempt - 1),
                               queued_at=time.time()))

    # -- commands ---------------------------------------------------------------------------------
    def submit(self, command: VideoCommand) -> bool:
        """Queue an analysis unless its task id was seen before; returns whether it was queued."""
        with self._lock:
            if command.task_id in self.states:
                return False
            self.states[command.task_id] = QUEUED
            queued_at = min(time.time(), parse_time(command.requested_at).timestamp())
            self.queue.append(Task(command, queued_at=queued_at))
            self.publisher.status(command.task_id, QUEUED, stage="queue", **command_fields(command))
            return True

    def cancel(self, command: VideoCommand) -> None:
        """Stop a queued or running task; a task not seen yet is cancelled before it starts (an analyze
        arriving later, out of order, then does not run); a finished task stays as it is."""
        with self._lock:
            task_id = command.task_id
            if self.states.get(task_id) in TERMINAL:
                return
            reason = f"cancelled by {command.requested_by}"
            self.states[task_id] = CANCELLED
            self._drop_queued(task_id)
            task = self.running.get(task_id)
            if task is not None and task.job is not None:
                task.cancelled_by = command.requested_by
                task.job.kill()
                self._finished(task)
            self.publisher.status(task_id, CANCELLED, error=reason, attempt=task.attempt if task else 0)

    def reject(self, task_id: str, reason: str) -> bool:
        """Fail the task of a command that cannot be carried out, unless that task exists (a malformed
        duplicate must not end a good task); returns whether it was failed. The reason is cut to
        :data:`MAX_REASON`: it may echo the command (an unknown option's name), and a status record over the
        bus's size limit could not be published (the micro-batch would fail, and its replay again)."""
        with self._lock:
            if task_id in self.states:
                return False
            self.states[task_id] = FAILED
            self.publisher.status(task_id, FAILED, error=f"bad command: {reason[:MAX_REASON]}")
            return True

    # -- launching and watching batch jobs ----------------------------------------------------------
    def release(self) -> None:
        with self._lock:
            self._held = False

    def tick(self) -> None:
        """Reap finished batch jobs (retrying the ones that died) and launch queued tasks into free slots."""
        with self._lock:
            for task in list(self.running.values()):
                code = task.job.poll() if task.job is not None else None
                if code is not None:
                    self._finished(task)
                    self._exited(task, code)
            while not self._held and self.queue and len(self.running) < self.max_concurrent:
                self._launch(self.queue.popleft())

    def _launch(self, task: Task) -> None:
        task.attempt += 1
        task_id = task.command.task_id
        self.states[task_id] = RUNNING
        self.publisher.status(task_id, RUNNING, stage="spark_start", attempt=task.attempt,
                              timings={"queue": max(0.0, time.time() - task.queued_at)})
        task.job = self.launcher(task.command, task.attempt)
        self.running[task_id] = task
        self.launched += 1
        self.peak_running = max(self.peak_running, len(self.running))
        self._pid_file(task_id).write_text(json.dumps({"pid": task.job.pid, "task_id": task_id}))

    def _exited(self, task: Task, code: int) -> None:
        task_id = task.command.task_id
        if task.cancelled_by or self.states.get(task_id) in TERMINAL or code in (0, EXIT_BAD_VIDEO):
            return  # done or failed was published by the batch job itself (its records may still be on the way)
        reason = f"batch job attempt {task.attempt} died (exit code {code})"
        if task.attempt < self.max_attempts:
            self.states[task_id] = QUEUED
            task.queued_at, task.job = time.time(), None
            self.queue.appendleft(task)
            self.publisher.status(task_id, QUEUED, stage="queue", attempt=task.attempt, error=reason)
        else:
            self.states[task_id] = FAILED
            self.publisher.status(task_id, FAILED, attempt=task.attempt,
                                  error=f"{reason}; gave up after {self.max_attempts} attempts")

    def _finished(self, task: Task) -> None:
        self.running.pop(task.command.task_id, None)
        self._pid_file(task.command.task_id).unlink(missing_ok=True)

    def _drop_queued(self, task_id: str) -> None:
        for task in list(self.queue):
            if task.command.task_id == task_id:
                self.queue.remove(task)

    def _pid_file(self, task_id: str) -> Path:
        return self.jobs_dir / f"{task_id}.json"

    def kill_orphans(self) -> list[str]:
        """Kill the batch jobs a previous (killed) ingest job left running; returns their task ids."""
        killed = []
        for file in sorted(self.jobs_dir.glob("*.json")):
            with contextlib.suppress(ValueError, KeyError, OSError):
                entry = json.loads(file.read_text())
                if _group_alive(int(entry["pid"]), entry["task_id"]):
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(int(entry["pid"]), signal.SIGKILL)
                    killed.append(entry["task_id"])
            file.unlink(missing_ok=True)
        return killed

    def stop(self) -> None:
        """Kill the running batch jobs (a graceful stop of the ingest job): the next start re-runs them."""
        with self._lock:
            self._held = True
            for task in list(self.running.values()):
                if task.job is not None:
                    task.job.kill()
                self.running.pop(task.command.task_id, None)

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {"queued": [t.command.task_id for t in self.queue], "running": sorted(self.running),
                    "launched": self.launched, "peak_running": self.peak_running}


def _group_alive(pgid: int, task_id: str) -> bool:
    """Whether a process of group ``pgid`` still runs the batch job of ``task_id`` (pids get reused)."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            stat = (proc / "stat").read_text()
            if int(stat.rsplit(")", 1)[1].split()[2]) == pgid and task_id.encode() in (proc / "cmdline").read_bytes():
                return True
    return False
