"""Which way the mirror copies: only from the site the active-site record names (`contracts/active_site.py`).

`make up` runs a mirror in each direction, primary -> dr and dr -> primary, each with ``--site-record`` and
``--source-site``. Each copies while its source site is active (and while a switchover away from it drains: what the
fenced site still holds must reach the new one) and stands by otherwise, so after a switchover the data flows back
to the old site without a restart. Standing by is a file read every half second: no connection to either bus, no
topic created, so it needs none of the rights its principal has only where the site is active or standing by.

Each time the source site becomes active a fresh :class:`~dr_mirror.mirror.Mirror` runs, which resumes every
partition from the target's log end through the offset syncs (the switchover's handover syncs, `syncs.write_handover`,
where the other direction copied last); it is stopped when the record names the other site or the process is asked
to stop.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from contracts.active_site import Gate, SiteRecordError, read_record
from dr_mirror.metrics import MirrorMetrics

log = logging.getLogger(__name__)

POLL_S = 0.5

Run = Callable[[threading.Event], None]
"""Runs a mirror until the event is set (``Mirror(settings, metrics, stop).run()``)."""


def copy(run: Run, stop: threading.Event, metrics: MirrorMetrics) -> None:
    """Run a mirror until it returns, ``dr_mirror_copying`` 1 meanwhile; its partitions' figures go with it."""
    metrics.copying.set(1)
    try:
        run(stop)
    finally:
        metrics.copying.set(0)
        metrics.forget_partitions()


def follow(gate: Gate, run: Run, metrics: MirrorMetrics, stopping: threading.Event, flow: str,
           poll_s: float = POLL_S) -> None:
    """Copy (``flow`` names it in the log, "primary -> dr") while ``gate`` is open, until ``stopping`` is set."""
    while _opened(gate, stopping, poll_s):
        log.info("copying %s: %s", flow, _said(gate))
        stop = threading.Event()
        watcher = threading.Thread(target=_watch, args=(gate, stopping, stop, poll_s), name="dr-mirror-gate",
                                   daemon=True)
        watcher.start()
        try:
            copy(run, stop, metrics)
        except Exception as exc:
            if not stop.is_set():
                raise
            # asked to stop while it waited for a cluster, the mirror raises that cluster's error: not a failure
            log.info("the mirror stopped while %s", exc)
        finally:
            stop.set()
            watcher.join()


def _opened(gate: Gate, stopping: threading.Event, poll_s: float) -> bool:
    """Wait until the gate is open (True) or the process is asked to stop (False); log once when standing by."""
    if stopping.is_set():
        return False
    if gate.active():
        return True
    log.info("standing by: %s", _said(gate))
    while not gate.active():
        if stopping.wait(poll_s):
            return False
    return True


def _watch(gate: Gate, stopping: threading.Event, stop: threading.Event, poll_s: float) -> None:
    """Set ``stop`` once the gate closes or the process is asked to stop (or the mirror ended on its own)."""
    while not stop.is_set() and gate.active():
        if stopping.wait(poll_s):
            break
    stop.set()


def _said(gate: Gate) -> str:
    """Which site the record names, for the line logged at each change."""
    try:
        site = read_record(gate.record)
    except SiteRecordError as exc:
        return f"{exc} (the last answer stands)"
    active = site.active if site is not None else "primary"
    said = f"{'the primary' if active == 'primary' else active} is active"
    if site is None:
        return f"{said} (no record yet at {gate.record})"
    return said if site.switching_to is None else f"{said}, switching to {site.switching_to}"
