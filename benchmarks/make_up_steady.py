"""`make up` running for minutes on this machine: how soon it is ready, where the CPU goes, whether it keeps the SLOs
it alerts on, and which alerts fire.

The whole solution exactly as `make up` starts it (the shipped config: the simulator's rate, the cameras, the Spark
jobs, the surveillance service, the monitor and its rules, the mirror; ``--flags=--dr-site`` adds what that flag
adds), on its own free ports and a fresh data directory, then `make down`. It prints:

- **ready**: seconds from starting `make up` (the servers start at once) to its "Press Ctrl-C" line, to the console
  answering ``/api/v1/health``, and to the first capture in HBase (the ingest job's status file counts a row);
- **CPU**: cores used per service over the steady window (from ready to the end), each process counted under the
  service `make up` started it as (a Spark job's JVM, its Python workers and the video batch jobs it launches are
  that job's), reaped children included; the machine's busy share and load averages beside it;
- **SLOs**: the capture -> HBase p99 the ingest job reports (its 30 s window) sampled through the run, against 2 s;
  capture -> watch hit latency (each hit's record timestamp against its capture's) against 100 ms;
- **alerts**: every alert the monitor fired, the pipeline's own (`IngestLatencyHigh`, `IngestStalled`,
  `MonitorLagging`) apart from the device faults the simulator plants.

    .venv/bin/python benchmarks/make_up_steady.py [--minutes 5] [--interval 5] [--flags=--dr-site]
"""

from __future__ import annotations

import argparse
import json
import os
import selectors
import shlex
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx
import psutil

from contracts.config import load as load_config
from contracts.ports import free_port
from contracts.processes import spawn
from contracts.topics import Topics
from deploy.processes.make_up import (
    MAKE_UP_PORTS,
    MARK_ENV,
    PIPELINE_ALERTS,
    down,
    fired_alerts,
    marked,
    read_topic,
    write_config,
)

ROOT = Path(__file__).resolve().parents[1]
HIT_ALERTS = {"WatchlistHit", "ClonedPlateSuspected"}
"""Hits the hit loader publishes as alerts (for the console and the receivers): the business, not a fault."""
INGEST_P99_SLO_MS = 2000
HIT_P99_SLO_MS = 100


def service_of(proc: psutil.Process, up_pid: int) -> str:
    """The service a process belongs to: the child of `make up` it descends from, named by its command line."""
    chain = [proc]
    try:
        while chain[-1].ppid() not in (up_pid, 0, 1):
            chain.append(psutil.Process(chain[-1].ppid()))
        return label(chain[-1].cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return label(proc.cmdline())


def label(cmdline: list[str]) -> str:
    """`python -m X ...` -> X; a Spark submission -> ``spark:<app>``; a Spark daemon -> its class; else the program."""
    if not cmdline:
        return "?"
    if "-m" in cmdline[:-1]:
        module = cmdline[cmdline.index("-m") + 1]
        if module == "bus" and "dr" in Path(cmdline[-1]).parts:  # the DR site's broker apart from the primary's
            return "bus (DR site)"
        return module
    apps = [Path(a).stem for a in cmdline if a.endswith(".py")]
    if Path(cmdline[0]).name == "java":
        classes = [a.rsplit(".", 1)[-1] for a in cmdline if a.startswith("org.apache.spark.")]
        return f"spark:{apps[0]}" if apps else f"java:{classes[-1] if classes else '?'}"
    return f"spark:{apps[0]}" if apps and "spark-submit" in " ".join(cmdline) else Path(cmdline[0]).name


class CpuLedger:
    """CPU seconds per service between samples: each live process's user+system time, and what its children used
    once it reaped them (short-lived workers show up only there) less what was already counted for them alive."""

    def __init__(self, marker: str, up_pid: int) -> None:
        self.marker, self.up_pid = marker, up_pid
        self.seen: dict[int, tuple[float, float, float, int]] = {}
        """pid -> (own CPU, reaped children's CPU, all counted for it, parent pid) at the last sample."""
        self.counted_gone: defaultdict[int, float] = defaultdict(float)
        """parent pid -> CPU counted for its children that have gone since (in its children time once reaped)."""
        self.used: defaultdict[str, float] = defaultdict(float)

    def sample(self, count: bool) -> None:
        now: dict[int, tuple[float, float, float, int]] = {}
        for proc in marked(self.marker):
            try:
                t = proc.cpu_times()
                name = "make up (deploy.up)" if proc.pid == self.up_pid else service_of(proc, self.up_pid)
                parent = proc.ppid()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            own, kids = t.user + t.system, t.children_user + t.children_system
            own_before, kids_before, counted, _ = self.seen.get(proc.pid, (0.0, 0.0, 0.0, parent))
            reaped = kids - kids_before
            already = min(reaped, self.counted_gone[proc.pid])
            self.counted_gone[proc.pid] -= already
            added = (own - own_before) + (reaped - already)
            if count:
                self.used[name] += added
            now[proc.pid] = (own, kids, counted + (added if count else 0.0), parent)
        for pid, (_own, _kids, counted, parent) in self.seen.items():
            if pid not in now:
                self.counted_gone[parent] += counted
        self.seen = now


def read_lines(proc: subprocess.Popen[bytes], selector: selectors.BaseSelector, out: list[str]) -> None:
    """What make up printed since the last call (never blocking; its status lines must not fill the pipe)."""
    assert proc.stdout is not None
    while selector.select(0):
        chunk = os.read(proc.stdout.fileno(), 65536)
        if not chunk:
            return
        out.append(chunk.decode(errors="replace"))


def console_up(port: int, ca: Path) -> bool:
    if not ca.exists():
        return False
    try:
        trust = ssl.create_default_context(cafile=str(ca))
        return httpx.get(f"https://127.0.0.1:{port}/api/v1/health", verify=trust, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def ingest_status(data_dir: Path) -> dict[str, Any] | None:
    try:
        return json.loads((data_dir / "ingest-status.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def hit_latencies_ms(data_dir: Path) -> list[float]:
    """Capture -> watch hit, per hit: the hit record's timestamp minus its capture record's (both set by their
    producers on this machine's clock)."""
    topics = Topics.from_config(load_config(data_dir / "solution.toml"))
    hits: dict[str, int] = {}
    for message in read_topic(data_dir, topics.surveillance_hits):
        hit = json.loads(message.value() or b"{}")
        if hit.get("kind") != "cloned_plate":
            hits.setdefault(hit["record_id"], message.timestamp()[1])
    captured: dict[str, int] = {}
    for topic in topics.captures:
        for message in read_topic(data_dir, topic, timeout=120):
            record_id = json.loads(message.value() or b"{}").get("record_id")
            if record_id in hits:
                captured[record_id] = message.timestamp()[1]
    return sorted(float(hits[r] - captured[r]) for r in hits if r in captured)


def broker_requests(port: int) -> dict[str, float]:
    """The primary broker's requests so far per Kafka API (`kafka_network_requestmetrics_requests_total`)."""
    try:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    except httpx.HTTPError:
        return {}
    counts = {}
    for line in text.splitlines():
        if line.startswith("kafka_network_requestmetrics_requests_total{"):
            labels, _, value = line.rpartition(" ")
            counts[labels.split('request="', 1)[1].split('"', 1)[0]] = float(value)
    return counts


def quantile(values: list[float], q: int) -> float:
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=5.0, help="how long make up runs after it starts")
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between samples")
    parser.add_argument("--flags", default="", help="more make up flags, given with '=' (--flags=--dr-site): "
                        "argparse takes a separate value starting with -- for an option")
    parser.add_argument("--repo", type=Path, default=ROOT, help="the checkout whose make up runs (a before/after pair)")
    args = parser.parse_args(argv)
    marker = uuid.uuid4().hex
    with tempfile.TemporaryDirectory(prefix="make-up-steady-") as tmp:
        ports = {name: free_port() for name in (*MAKE_UP_PORTS, "busm")}
        config = write_config(Path(tmp), ports, shipped=True)
        data_dir = Path(tmp) / "data"
        began = time.monotonic()
        proc = spawn([sys.executable, "-m", "deploy.up", "--config", str(config), "--data-dir", str(data_dir),
                      "--kafka-port", str(ports["bus"]), "--controller-port", str(ports["controller"]),
                      "--hbase-port", str(ports["hbase"]), "--console-port", str(ports["console"]),
                      *shlex.split(args.flags)],
                     subprocess.PIPE, env={**os.environ, MARK_ENV: marker}, cwd=args.repo.resolve())
        assert proc.stdout is not None
        printed: list[str] = []
        ready: dict[str, float] = {}
        p99s: list[int] = []
        timeline: list[tuple[float, int, float]] = []
        """(seconds since make up began, the ingest's p99 ms, its records/s) at each sample"""
        loads: list[float] = []
        ledger = CpuLedger(marker, proc.pid)
        machine_before = psutil.cpu_times()
        steady_from = 0.0
        requests_before: dict[str, float] = {}
        try:
            with selectors.DefaultSelector() as selector:
                selector.register(proc.stdout, selectors.EVENT_READ)
                end = began + args.minutes * 60
                while time.monotonic() < end:
                    if proc.poll() is not None:
                        raise RuntimeError(f"make up exited ({proc.returncode}):\n{''.join(printed)}")
                    read_lines(proc, selector, printed)
                    now = time.monotonic() - began
                    if "started" not in ready and "Press Ctrl-C" in "".join(printed):
                        ready["started"] = now
                    if "console" not in ready and console_up(ports["console"], data_dir / "secrets" / "ca.pem"):
                        ready["console"] = now
                    status = ingest_status(data_dir)
                    if status and "first row" not in ready and sum(status.get("valid", {}).values()):
                        ready["first row"] = now
                    steady = len(ready) == 3
                    if steady and not steady_from:
                        steady_from, machine_before = now, psutil.cpu_times()
                        requests_before = broker_requests(ports["busm"])
                    ledger.sample(count=steady)
                    if steady:
                        loads.append(os.getloadavg()[0])
                        p99 = (status or {}).get("latency_ms", {}).get("p99")
                        if p99 is not None:
                            p99s.append(int(p99))
                            timeline.append((now, int(p99), float((status or {}).get("records_per_s", 0.0))))
                    time.sleep(max(0.0, args.interval - (time.monotonic() - began - now)))
            machine_after = psutil.cpu_times()
            window = time.monotonic() - began - steady_from
            requests = broker_requests(ports["busm"])
            alerts = fired_alerts(data_dir)
            hits = hit_latencies_ms(data_dir)
        finally:
            said = down(data_dir, proc, timeout=120)
    print(f"make up {args.flags or '(defaults)'} for {args.minutes:g} min; {len(os.sched_getaffinity(0))} cores")
    for name in ("started", "console", "first row"):
        print(f"  ready: {name:<10} {ready.get(name, float('nan')):6.1f} s after make up began")
    if not steady_from:
        print("  never ready: no steady window")
        return 1
    busy = 1 - (machine_after.idle - machine_before.idle) / (sum(machine_after) - sum(machine_before))
    print(f"  steady window {window:.0f} s: machine {busy:.0%} busy, load average 1-min mean "
          f"{statistics.mean(loads):.1f} max {max(loads):.1f} (make up {args.repo.resolve()})")
    for name, seconds in sorted(ledger.used.items(), key=lambda item: -item[1]):
        print(f"    {name:<36} {seconds / window:5.2f} cores")
    print(f"    {'all of make up':<36} {sum(ledger.used.values()) / window:5.2f} cores")
    rates = sorted(((n, (c - requests_before.get(n, 0.0)) / window) for n, c in requests.items()), key=lambda r: -r[1])
    print(f"  primary broker requests/s: {sum(r for _, r in rates):,.0f}: "
          + ", ".join(f"{name} {rate:,.0f}" for name, rate in rates[:8]))
    if p99s:
        kept = sum(p <= INGEST_P99_SLO_MS for p in p99s) / len(p99s)
        print(f"  ingest p99 (30 s windows, {len(p99s)} samples): median {statistics.median(p99s)} ms, "
              f"max {max(p99s)} ms; <= {INGEST_P99_SLO_MS} ms in {kept:.0%} of samples")
        minutes: dict[int, list[tuple[int, float]]] = defaultdict(list)
        for at, p99, rate in timeline:
            minutes[int(at // 60)].append((p99, rate))
        print("  ingest by minute since make up began (max p99, mean records/s): " + ", ".join(
            f"{m}: {max(p for p, _ in v)} ms {statistics.mean(r for _, r in v):.0f}/s"
            for m, v in sorted(minutes.items())))
    if hits:
        print(f"  capture -> watch hit ({len(hits)} hits): p50 {quantile(hits, 50):.0f} ms, "
              f"p99 {quantile(hits, 99):.0f} ms, max {hits[-1]:.0f} ms (SLO p99 <= {HIT_P99_SLO_MS} ms)")
    names = Counter(a["labels"].get("alertname", "?") for a in alerts)
    own = {n: c for n, c in names.items() if n in PIPELINE_ALERTS}
    hits = {n: c for n, c in names.items() if n in HIT_ALERTS}
    print(f"  alerts fired: pipeline {own or 'none'}; devices {dict(names - Counter(own) - Counter(hits)) or 'none'}; "
          f"hits as alerts {hits or 'none'}")
    print(f"  make down: {said.strip().splitlines()[-1] if said.strip() else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
