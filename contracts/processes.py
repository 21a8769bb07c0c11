"""Spawning a child process with its output in a log file, and stopping it within a bound.

Every process the solution starts goes through `spawn`, so each one gets the same treatment: run from the
repository root, stdout and stderr appended to one log file (the child keeps its own descriptor; the parent closes
its copy at once), stdin from /dev/null, unbuffered Python output, and optionally a session of its own (its process
group can be signalled as a whole: a Spark driver and its JVM) or a SIGTERM when the parent dies (a wrapper that is
SIGKILLed must not leave its server running). `terminate` is the one way to stop one.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parents[1]
"""The repository root: where every child runs, so `python -m <package>` finds the checkout."""

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the parent dies, even by SIGKILL (Linux's PR_SET_PDEATHSIG), since a
    child in a session of its own is reached by no signal to the parent's group."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def spawn(args: Sequence[str | os.PathLike[str]], log: Path | IO[bytes] | int | None, *, cwd: Path | None = None,
          env: Mapping[str, str] | None = None, new_session: bool = False, die_with_parent: bool = False,
          stderr: IO[bytes] | int | None = subprocess.STDOUT,
          stdin: IO[bytes] | int | None = subprocess.DEVNULL) -> subprocess.Popen[bytes]:
    """Start `args` with stdout and stderr appended to `log` (a path, an open binary file, `subprocess.PIPE`, or
    None to inherit the parent's). `env` replaces the environment (default: the parent's), with PYTHONUNBUFFERED
    set so a log shows what a Python child printed before it died. `stderr` goes elsewhere when given (a job whose
    stdout is its result, read from a pipe); `stdin` is /dev/null unless given (`subprocess.PIPE` for a child that
    is driven through it)."""
    environment = {**(os.environ if env is None else env), "PYTHONUNBUFFERED": "1"}

    def start(out: IO[bytes] | int | None) -> subprocess.Popen[bytes]:
        return subprocess.Popen([os.fspath(a) for a in args], cwd=cwd or ROOT, env=environment,
                                stdin=stdin, stdout=out, stderr=stderr,
                                start_new_session=new_session, preexec_fn=_die_with_parent if die_with_parent else None)

    if isinstance(log, Path):
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as out:  # the child keeps its own copy of the descriptor
            return start(out)
    return start(log)


def niced(increment: int) -> list[str]:
    """The prefix that starts a command ``increment`` lower in CPU priority (coreutils' ``nice``; its children
    inherit it), or nothing for 0. A process that stands in for the outside world (a camera simulator) or whose
    delay costs little (a batch analysis) gives the CPU to the capture path when the machine saturates."""
    if not 0 <= increment <= 19:
        raise ValueError(f"a nice increment is 0 to 19, not {increment}")
    return ["nice", "-n", str(increment)] if increment else []


def terminate(child: subprocess.Popen[bytes], grace: float) -> int:
    """SIGTERM, then SIGKILL once `grace` seconds have passed; returns the exit status once the child is gone."""
    if child.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            child.terminate()
    try:
        return child.wait(grace)
    except subprocess.TimeoutExpired:
        child.kill()
        return child.wait()


def kill(child: subprocess.Popen[bytes]) -> None:
    """kill -9, as a crash: no shutdown hook runs."""
    if child.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            child.kill()
        child.wait()
