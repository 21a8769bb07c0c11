"""What publishing ``ingest.stats`` costs the ingest job: throughput with and without it (a script, not a test).

Starts a broker and the HBase gateway, loads ``--records`` captures with the simulator once, then runs
the Spark ingest job (``--once``, a fresh checkpoint each run, so every run reads the same backlog and
writes the same row keys) alternately with and without ``--no-stats``, after one uncounted warm-up run.
A run's throughput is the records of its batches after the first (which pays the warm-up) over the
time between the first and the last batch line. Prints per-mode medians, the drop
``1 - with / without`` (target <= 5 %) and the load average: the lead measures on a quiet machine.

    .venv/bin/python benchmarks/ingest_stats_cost.py [--records 200000] [--rounds 2] [--batch 20000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from deploy.processes.broker import BrokerProcess  # noqa: E402
from deploy.processes.gateway import start_gateway  # noqa: E402
from deploy.processes.ingest import ingest_job, simulate  # noqa: E402


def run(args: argparse.Namespace, broker: BrokerProcess, gateway_port: int, root: Path, name: str,
        stats: bool) -> dict[str, float]:
    """One ``--once`` run; batch lines are time-stamped as they appear in the job's log."""
    log = root / f"{name}.log"
    extra = [] if stats else ["--no-stats"]
    job = ingest_job(broker.bootstrap, gateway_port, root / f"ckpt-{name}", log, "--once",
                     "--max-offsets-per-trigger", str(args.batch), "--trigger-ms", "0", *extra)
    seen: list[tuple[float, int]] = []
    offset = 0
    try:
        while True:
            done = job.poll() is not None
            text = log.read_text(errors="replace") if log.exists() else ""
            for line in text[offset:].splitlines(keepends=True):
                if not line.endswith("\n"):
                    break
                offset += len(line)
                if line.startswith('{"batch"'):
                    seen.append((time.monotonic(), json.loads(line)["records"]))
            if done:
                break
            time.sleep(0.05)
    finally:
        job.kill()
    if job.poll() != 0 or len(seen) < 3:
        raise SystemExit(f"{name}: exit {job.poll()}, {len(seen)} batches\n{log.read_text()[-3000:]}")
    records = sum(n for _, n in seen[1:])
    return {"records_per_s": round(records / (seen[-1][0] - seen[0][0]), 1), "batches": len(seen),
            "records": sum(n for _, n in seen)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=20_000, help="maxOffsetsPerTrigger: records per batch")
    parser.add_argument("--rounds", type=int, default=2, help="runs per mode (alternating), after a warm-up")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-ingest-stats-"))
    broker = BrokerProcess(root / "bus").start()
    gateway = start_gateway(root / "hbase", log_dir=root)
    try:
        summary = simulate(broker.bootstrap, root, "--count", str(args.records), "--rate", "100000", "--seed", "5",
                           "--curve", "flat", timeout=600)
        print(f"loaded {sum(summary['produced'].values())} captures", flush=True)
        run(args, broker, gateway.port, root, "warmup", True)
        rates: dict[str, list[float]] = {"with_stats": [], "without_stats": []}
        for n in range(args.rounds):
            for mode in (("without_stats", "with_stats") if n % 2 else ("with_stats", "without_stats")):
                result = run(args, broker, gateway.port, root, f"{mode}-{n}", mode == "with_stats")
                rates[mode].append(result["records_per_s"])
                print(f"round {n + 1} {mode}: {json.dumps(result)}", flush=True)
        with_stats, without = (statistics.median(rates[m]) for m in ("with_stats", "without_stats"))
        print(json.dumps({"records": args.records, "batch": args.batch, "rounds": args.rounds,
                          "with_stats_records_per_s": with_stats, "without_stats_records_per_s": without,
                          "drop": round(1 - with_stats / without, 4), "target_drop": 0.05,
                          "load_average": [round(x, 2) for x in os.getloadavg()]}))
    finally:
        gateway.kill()
        broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
