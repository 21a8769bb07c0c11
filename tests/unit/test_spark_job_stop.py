"""Stopping a Spark job leaves nothing of its process group behind: a process that outlives the job's JVM (a Python
driver that did not exit with it) is killed, not orphaned. A CI run once left a video ingest driver running for half
an hour after its test."""

from __future__ import annotations

import os
import signal
import subprocess
import time

from contracts.processes import spawn
from spark_jobs.launch import SparkJob

# A "JVM" that starts a straggler ignoring SIGTERM in its own group, then says the straggler's pid once it would itself
# exit on SIGTERM (said before `trap - TERM`, a SIGTERM could find the shell still ignoring it, as in one CI run).
JOB = "trap '' TERM; sleep 300 & straggler=$!; trap - TERM; echo $straggler; exec sleep 300"


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split()[2] != "Z"


def test_stop_kills_what_outlives_the_jvm() -> None:
    job = SparkJob(spawn(["sh", "-c", JOB], subprocess.PIPE, new_session=True), None, None)
    assert job.proc.stdout is not None
    straggler = int(job.proc.stdout.readline())
    try:
        assert alive(straggler)
        assert job.stop(timeout=5) == -signal.SIGTERM
        deadline = time.monotonic() + 5
        while alive(straggler) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(straggler), "a process of the job's group outlived stop()"
    finally:
        if alive(straggler):
            os.kill(straggler, signal.SIGKILL)
