"""Shared pieces of the video tests: the services fixture (the real services and the video ingest job are started
by `deploy/processes/video.py`), the ingest job's start-up report, and the commands a test sends.

Fixtures are module-scoped: Spark and SeaweedFS start slowly, so one module's tests share them (and the
ingest job where they can). V2/V3 may add ``_support_*.py`` beside this file.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deploy.processes.video import IngestJob, VideoServices, video_services


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VideoServices]:
    with video_services(tmp_path_factory.mktemp("video")) as found:
        yield found


def started_line(job: IngestJob) -> dict[str, Any]:
    """The last start-up report of the job (``orphans_killed``, what it took over)."""
    lines = [line for line in job.log.read_text(errors="replace").splitlines() if line.startswith('{"started"')]
    return json.loads(lines[-1])


def group_alive(pgid: int) -> bool:
    """Whether any live (not zombie) process of the process group still exists."""
    for proc in Path("/proc").iterdir():
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
            if proc.name.isdigit() and int(fields[2]) == pgid and fields[0] != "Z":
                return True
    return False


def analyze(task_id: str, url: str, camera: str = "cam-1", **options: Any) -> dict[str, Any]:
    from contracts.video import command_record

    return command_record(task_id, url, camera, "tester", options or None)
