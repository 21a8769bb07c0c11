"""What a drill records over time and writes at the end: mirror lag samples, a PNG chart, the Markdown table, and
the images missing at the DR site next to the records missing (:func:`image_gaps`).

The chart has two panels over the drill's clock: the mirrors' summed partition lag (records), and the
records/s the devices had acknowledged by each site, with the drill's events (kill, failover, restart,
switch back) as vertical lines, so a reader sees how far behind the mirror was when the primary went.
"""

from __future__ import annotations

import math
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

LAG_METRIC = "dr_mirror_partition_lag_records{"


def mirror_lag(port: int, timeout: float = 1.0) -> float | None:
    """The summed partition lag a mirror exports on /metrics; None when it does not answer."""
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout).read().decode()
    except OSError:
        return None
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(LAG_METRIC))


class LagProbe(threading.Thread):
    """Samples a mirror's lag every half second (None while it is down)."""

    def __init__(self, port: int, name: str) -> None:
        super().__init__(daemon=True)
        self.port, self.name = port, name
        self.samples: list[tuple[float, float | None]] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.wait(0.5):
            self.samples.append((time.time(), mirror_lag(self.port)))


def rates(acks: list[tuple[float, str]], t0: float, end: float, step: float = 1.0) -> dict[str, list[float]]:
    """Acknowledged records per second per site, in ``step`` buckets from ``t0``."""
    buckets = int((end - t0) / step) + 1
    out: dict[str, list[float]] = {}
    for when, site in acks:
        index = int((when - t0) / step)
        if 0 <= index < buckets:
            out.setdefault(site, [0.0] * buckets)[index] += 1 / step
    return out


def chart(path: Path, title: str, t0: float, probes: list[LagProbe], acks: list[tuple[float, str]],
          events: dict[str, float]) -> None:
    """The drill's PNG: mirror lag (top) and acknowledged records/s per site (bottom), events as lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    end = max([t for p in probes for t, _ in p.samples] + [t for t, _ in acks] + [t0 + 1])
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 6), sharex=True, constrained_layout=True)
    for probe in probes:
        # A mirror that does not answer (killed, not yet started) leaves a gap, not a line across its outage.
        # The set-up before the load (minutes of Spark start, nothing to mirror) is left out.
        points = [(t - t0, math.nan if v is None else v) for t, v in probe.samples if t >= t0]
        if points:
            top.plot(*zip(*points, strict=True), label=f"mirror {probe.name}", linewidth=1.5)
    top.set_ylabel("mirror lag (records)")
    top.set_title(title)
    per_site = rates(acks, t0, end)
    for site, values in sorted(per_site.items()):
        bottom.step(range(len(values)), values, where="post", label=f"acked by {site}")
    bottom.set_ylabel("acknowledged records/s")
    bottom.set_xlabel("seconds since the load started")
    for axis in (top, bottom):
        for when in events.values():
            axis.axvline(when - t0, color="grey", linestyle="--", linewidth=1)
        axis.grid(alpha=0.3)
        if axis.get_legend_handles_labels()[0]:
            axis.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small")
    for index, (name, when) in enumerate(sorted(events.items(), key=lambda event: event[1])):
        height = 0.97 if index % 2 == 0 else 0.5  # events seconds apart: their labels alternate in height
        top.annotate(name, (when - t0, height), xycoords=("data", "axes fraction"), rotation=90, va="top",
                     ha="right", fontsize="small", color="dimgrey", backgroundcolor="white")
    fig.savefig(path, dpi=100)
    plt.close(fig)


def image_gaps(keys: Iterable[str], at_primary: Callable[[str], bool], at_dr: Callable[[str], bool],
               workers: int = 16) -> dict[str, int]:
    """The images the DR site's records name, counted by where they are: ``images_missing_at_dr`` (at the primary,
    not at the DR site: what the copier still owes, the figure a drill reports next to the records missing) and
    ``images_missing_at_both`` (never uploaded, or expired: nothing to copy). ``at_primary`` / ``at_dr`` answer
    whether a key is in that site's ``captures`` bucket (a HEAD); ``keys`` are the records' image keys."""
    keys = list(dict.fromkeys(keys))
    with ThreadPoolExecutor(workers) as pool:
        dr = list(pool.map(at_dr, keys))
        missing = [key for key, there in zip(keys, dr, strict=True) if not there]
        primary = list(pool.map(at_primary, missing))
    return {"images": len(keys), "images_at_dr": sum(dr),
            "images_missing_at_dr": sum(primary), "images_missing_at_both": len(missing) - sum(primary)}


def _cell(value: Any) -> str:
    """A table cell: a mapping (restarts per process) as ``name: n`` pairs, a list comma-separated, "none" if empty."""
    if isinstance(value, dict):
        return ", ".join(f"{k}: {v}" for k, v in value.items()) or "none"
    if isinstance(value, list):
        return ", ".join(map(str, value)) or "none"
    return str(value)


def markdown(report: dict[str, Any]) -> str:
    lines = [f"# DR drill: {report['scenario']}", "", "| measure | value |", "|---|---|"]
    lines += [f"| {k} | {_cell(v)} |" for k, v in report.items() if k != "scenario"]
    return "\n".join(lines) + "\n"
