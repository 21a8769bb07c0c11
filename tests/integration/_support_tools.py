"""Running `bus <tool>` as a subprocess, the way an operator does, for the tool tests."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

from contracts.processes import ROOT


def bus(*args: str, input: str | None = None, timeout: float = 60.0,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m bus ARGS`: stdout, stderr and the exit code, never hanging past `timeout`."""
    return subprocess.run([sys.executable, "-m", "bus", *args], cwd=ROOT, input=input, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})


def ok(result: subprocess.CompletedProcess[str]) -> str:
    """The stdout of a run that must have succeeded (the failure message shows both streams)."""
    assert result.returncode == 0, f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    return result.stdout


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"
