"""``python -m deploy.chaos --seed N --minutes M [--report DIR]``: a Jepsen-style fault run against the bus.

Three broker hosts (network namespaces on this machine, see docs/hosts.md) run a three-node cluster; an idempotent
acks=all producer, a transactional producer and a consumer group (read_committed) work against a topic of three
partitions with three replicas and ``min.insync.replicas=2`` while the nemesis deals a seeded random schedule of
faults (kill -9, SIGSTOP pauses, a host's link down, a partition between two brokers that leaves clients connected
to both, a clock step). Then the faults stop, the cluster heals, the clients drain, the whole topic is read back, and
the checker reports lost, duplicated and reordered records, consumer offsets that go backwards or skip, and reads of
aborted or never-sent records (:mod:`deploy.chaos.checker`). The report (``chaos.json``, ``chaos.md``) goes to
``--report``; the exit status is 0 when nothing was found, 1 when something was, 2 for bad arguments or a run that
could not start.

Each host's clock starts up to ``--skew`` seconds off, and the clock fault steps one (libfaketime, see
:mod:`deploy.hosted_cluster`). Needs root (network namespaces) and Debian's faketime.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

from deploy.hosted_cluster import FAKETIME, HostedCluster
from deploy.hosts import Network

from .checker import Anomalies, History, check
from .nemesis import FAULTS, Nemesis
from .workload import QUIET, Workload, final_log

TOPIC = "chaos"
PARTITIONS = 3


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m deploy.chaos", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=None, help="the fault schedule's seed (default: a random one)")
    parser.add_argument("--minutes", type=float, default=1.0, help="how long the faults go on")
    parser.add_argument("--faults", default=",".join(FAULTS), help=f"comma-separated, of {', '.join(FAULTS)}")
    parser.add_argument("--rate", type=float, default=200.0, help="records/s of the idempotent producer")
    parser.add_argument("--skew", type=int, default=3,
                        help="each host's clock starts up to this many seconds off, either way (0: all agree)")
    parser.add_argument("--report", type=Path, default=None, help="directory for chaos.json and chaos.md")
    args = parser.parse_args(argv)
    faults = [name.strip() for name in args.faults.split(",") if name.strip()]
    if not faults or set(faults) - set(FAULTS):
        parser.error(f"--faults: one or more of {', '.join(FAULTS)}, got {args.faults!r}")
    if args.minutes <= 0 or args.rate <= 0 or args.skew < 0:
        parser.error("--minutes and --rate must be positive, --skew at least 0")
    if (args.skew or "clock" in faults) and FAKETIME is None:
        parser.error("clocks off (--skew, the clock fault) need libfaketime: apt-get install faketime")
    args.faults = faults
    if args.seed is None:
        args.seed = random.randrange(1 << 31)
    return args


def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    rng = random.Random(args.seed)
    with Network() as network:
        skews = {node: rng.randint(-args.skew, args.skew) for node in (1, 2, 3)}
        cluster = HostedCluster(network, 3, work, skews).start()
        client = cluster.client()
        admin = AdminClient({**client, **QUIET})
        [created] = admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3, config={"min.insync.replicas": "2"})]).values()
        created.result(timeout=30)
        workload = Workload(client, TOPIC, PARTITIONS, rng, rate=args.rate).start()
        _wait(lambda: workload.acknowledged() >= 100, 60, "the first 100 acknowledged records")
        nemesis = Nemesis(cluster, rng, faults=args.faults)
        seconds = args.minutes * 60
        with _progress(seconds) as advance:
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                nemesis.strike()
                advance(seconds - (deadline - time.monotonic()), workload.acknowledged(), len(nemesis.timeline))
        healed = time.monotonic()
        history = workload.stop()
        history.log = final_log(client, TOPIC, PARTITIONS, "read_uncommitted")
        committed = final_log(client, TOPIC, PARTITIONS, "read_committed")
        history.committed = {p: {offset for offset, _v in records} for p, records in committed.items()}
        drained_s = time.monotonic() - healed
    found = check(history)
    report = _report(args, history, found, nemesis.timeline, workload.errors, drained_s, cluster.skews)
    report["transactional_producers_recreated_after_fencing"] = workload.producers_recreated
    return report


def _wait(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:.0f} s")
        time.sleep(0.2)


class _progress:
    """A progress bar over the fault phase on a terminal, a line every strike otherwise (logs, CI)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.bar = Progress(TextColumn("faults"), BarColumn(), TextColumn("{task.fields[status]}"),
                            TimeRemainingColumn()) if sys.stderr.isatty() else None

    def __enter__(self) -> Any:
        if self.bar is None:
            return lambda done, acked, faults: print(f"{done:5.0f}/{self.seconds:.0f} s: {acked} acknowledged, "
                                                     f"{faults // 2} faults", file=sys.stderr, flush=True)
        self.bar.start()
        task = self.bar.add_task("faults", total=self.seconds, status="")
        return lambda done, acked, faults: self.bar.update(
            task, completed=done, status=f"{acked} acknowledged, {faults // 2} faults")

    def __exit__(self, *_: object) -> None:
        if self.bar is not None:
            self.bar.stop()


def _report(args: argparse.Namespace, history: History, found: Anomalies, timeline: list[tuple[float, str]],
            errors: list[str], drained_s: float, skews: dict[int, int]) -> dict[str, Any]:
    counts = found.counts()
    examples = {name: [repr(item) for item in getattr(found, name)[:5]] for name, count in counts.items() if count}
    return {
        "seed": args.seed, "minutes": args.minutes, "faults": args.faults, "ok": found.ok, "clock_skews_s": skews,
        "acknowledged": len(history.acks), "sent": len(history.sent), "in_doubt": len(history.in_doubt),
        "aborted_on_purpose": len(history.aborted), "reads": len(history.reads),
        "records_in_log": sum(len(records) for records in history.log.values()),
        "anomalies": counts, "examples": examples, "client_errors": errors,
        "seconds_to_drain_after_the_faults": round(drained_s, 1),
        "timeline": [{"t": t, "fault": what} for t, what in timeline],
    }


def markdown(report: dict[str, Any]) -> str:
    verdict = "nothing found" if report["ok"] else "ANOMALIES FOUND"
    lines = [f"# Chaos run, seed {report['seed']}: {verdict}", "",
             f"{report['minutes']} min of faults ({', '.join(report['faults'])}), clocks off by "
             f"{', '.join(f'{s:+d} s' for s in report['clock_skews_s'].values())} at the end; "
             f"{report['acknowledged']} records acknowledged of {report['sent']} sent ({report['in_doubt']} in "
             f"doubt, {report['aborted_on_purpose']} in transactions aborted on purpose); {report['reads']} reads "
             f"by the consumer group; {report['records_in_log']} records in the log; the transactional producer "
             f"was fenced and made anew {report['transactional_producers_recreated_after_fencing']} times.", "",
             "| anomaly | count |", "|---|---|"]
    lines += [f"| {name.replace('_', ' ')} | {count} |" for name, count in report["anomalies"].items()]
    lines += ["", "## Faults", "", *(f"- {entry['t']:.1f} s: {entry['fault']}" for entry in report["timeline"])]
    if report["client_errors"]:
        lines += ["", "## Client errors", "", *(f"- {error}" for error in report["client_errors"])]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    # SIGTERM (a CI timeout, kill) ends the run like Ctrl-C: the hosts' namespaces, links and nodes are removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if os.geteuid() != 0:
        print("python -m deploy.chaos: the broker hosts are network namespaces, which need root", file=sys.stderr)
        return 2
    print(f"chaos run: seed {args.seed}, {args.minutes} min of {', '.join(args.faults)}", file=sys.stderr)
    if args.report is None:
        with tempfile.TemporaryDirectory(prefix="chaos-") as work:
            report = run(args, Path(work))
    else:  # the nodes' data and logs stay beside the report, to look into what it found
        args.report.mkdir(parents=True, exist_ok=True)
        report = run(args, Path(tempfile.mkdtemp(prefix="cluster-", dir=args.report)))
        (args.report / "chaos.json").write_text(json.dumps(report, indent=2) + "\n")
        (args.report / "chaos.md").write_text(markdown(report))
    print(markdown(report))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
