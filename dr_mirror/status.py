"""``python -m dr_mirror status [--data-dir DATA]``: which site is active and since when, and how far behind the
mirror is, per topic in records and seconds, with what losing the primary now would cost.

It reads a running `make up`'s ``DATA/dr/active-site.json`` (``contracts.active_site``) and the Prometheus endpoint of
the mirror copying from the active site (``[dr] mirror_metrics_port`` of ``DATA/solution.toml``, or after a
switchover to the DR site ``[dr] reverse_mirror_metrics_port``; or ``--metrics-url``).

Exit status: 0; 1 when the mirror does not answer (the active site is still printed); 2 for bad arguments or a data
directory without a solution config or with an unreadable active-site record.
"""

from __future__ import annotations

import argparse
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from contracts import active_site as site
from contracts import config as solution_config
from dr_mirror import lag

TIMEOUT_S = 5.0


def _seconds(value: float | None) -> str:
    return "unknown" if value is None else f"{value:,.1f}"


def report(partitions: list[dict[str, Any]], active: str = "primary") -> list[str]:
    """The lines about the mirror copying from the ``active`` site: the RPO now, then one per topic (records,
    seconds)."""
    rpo = lag.rpo_now(partitions)
    losing = "the primary" if active == "primary" else "the DR site"
    if rpo["records"] == 0:
        lines = [f"mirror: caught up; losing {losing} now would lose nothing"]
    elif rpo["seconds"] is None:
        lines = [f"mirror: {rpo['records']:,} records behind; losing {losing} now would lose them (their age is "
                 "not known yet)"]
    else:
        lines = [f"mirror: {rpo['records']:,} records behind; losing {losing} now would lose them, "
                 f"{rpo['seconds']:,.1f} s of writes"]
    lines.append(f"  {'topic':<28} {'records':>10} {'seconds':>9}")
    for topic, figures in lag.per_topic(partitions).items():
        lines.append(f"  {topic:<28} {figures['records']:>10,} {_seconds(figures['seconds']):>9}")
    stopped = sorted({f"{p['topic']}-{p['partition']}" for p in partitions if p["stopped"]})
    if stopped:
        lines.append(f"  stopped by an error (see the mirror's log): {', '.join(stopped)}")
    return lines


def mirror_port(config: solution_config.Config, active: site.ActiveSite | None) -> int:
    """The metrics port of the mirror copying from the active site: primary -> dr (``[dr] mirror_metrics_port``), or
    after a switchover dr -> primary (``[dr] reverse_mirror_metrics_port``)."""
    if active is not None and active.active == "dr":
        return int(config.get("dr", "reverse_mirror_metrics_port", 9322))
    return int(config.get("dr", "mirror_metrics_port", 9320))


def last_switchover(last: dict[str, Any]) -> str:
    """The line about the last switchover (`dr_mirror.switchover` keeps its figures in the record)."""
    lost = last.get("records_lost")
    said = "unknown" if lost is None else f"{lost:,}"
    kind = "planned" if last.get("planned") else "unplanned"
    drained = f", drained in {last['drained_s']:,.1f} s" if "drained_s" in last else ""
    return (f"last switchover: {kind}, from {last.get('from', '?')}: {said} records lost{drained}, switched in "
            f"{last.get('switch_s', 0):,.1f} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dr_mirror status", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=Path("data"), help="make up's data directory (data)")
    parser.add_argument("--metrics-url", help="the mirror's /metrics (default from [dr] mirror_metrics_port)")
    args = parser.parse_args(argv)
    config_path = args.data_dir / "solution.toml"
    if not config_path.is_file():
        parser.error(f"{config_path} not found: is --data-dir a make up data directory?")
    try:
        active = site.read(args.data_dir)
        config = solution_config.load(config_path)
    except (site.SiteRecordError, ValueError) as exc:
        print(f"dr_mirror status: {exc}", file=sys.stderr)
        return 2
    print(active.line() if active else "active: primary (no switchover recorded)")
    if active is not None and active.last is not None:
        print(last_switchover(active.last))
    url = args.metrics_url or f"http://127.0.0.1:{mirror_port(config, active)}/metrics"
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
            partitions = lag.parse_lag(response.read().decode())
    except (urllib.error.URLError, OSError, ValueError) as exc:
        print(f"mirror: not answering at {url} ({exc}): its lag is unknown", flush=True)
        return 1
    print("\n".join(report(partitions, active.active if active else "primary")), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
