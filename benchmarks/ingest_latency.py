"""Capture -> HBase latency of the whole slice on this machine (a script, not a test).

Starts a broker, the HBase gateway and the Spark ingest job (streaming), waits for the job's first
batch, then for each rate runs the simulator at a flat ``rate`` records/s for ``--seconds`` and
waits until every valid record is in HBase. Latency per row is ``ingest_time - capture_time``
(both stamped in the rows: the simulator's capture clock and the job's stamp just before the
HBase write), so it covers producing, the bus, the micro-batch wait, reading, validation and the
write. Reports p50/p95/p99/max and rows/s per rate; stops at the first rate the slice cannot
sustain (backlog growing, or p99 above ``--max-p99``), which is the ceiling.

With ``--spark-workers N`` the job runs on a Spark standalone cluster of N one-core workers started here (Spark's own
master and workers from the pyspark jars, ``deploy/processes/spark_cluster.py``) instead of ``local[2]``; the first
line then includes packing the executors' environment when none is cached (``--cold`` removes the cache first).

    .venv/bin/python benchmarks/ingest_latency.py [--rates 2000,3000,4000] [--seconds 30] [--trigger-ms 0]
        [--spark-workers 2 [--cold]]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import happybase  # noqa: E402

from contracts import records  # noqa: E402
from contracts.tables import captures  # noqa: E402
from deploy.processes.broker import BrokerProcess  # noqa: E402
from deploy.processes.gateway import start_gateway  # noqa: E402
from deploy.processes.ingest import ingest_job, simulate  # noqa: E402
from deploy.processes.spark_cluster import SparkCluster  # noqa: E402
from spark_jobs import packaging  # noqa: E402
from spark_jobs.ingest_status import percentile  # noqa: E402
from spark_jobs.launch import SparkSettings  # noqa: E402
from testkit.polling import poll  # noqa: E402

SEQUENCE_STRIDE = 1_000_000_000  # each stage's record ids continue far above the previous stage's


def latencies(conn: happybase.Connection, since_ms: int) -> tuple[list[int], int, int]:
    """Latencies (ms) of valid rows captured after ``since_ms``, and the first capture / last ingest times."""
    out, first, last = [], None, 0
    for table in ("vehicle", "face"):
        scan = conn.table(table).scan(batch_size=5000, columns=[b"r:capture_time", b"r:ingest_time"])
        for _, data in scan:
            captured = records.epoch_ms(data[b"r:capture_time"].decode())
            if captured < since_ms:
                continue
            ingested = records.epoch_ms(data[b"r:ingest_time"].decode())
            out.append(ingested - captured)
            first = captured if first is None else min(first, captured)
            last = max(last, ingested)
    return out, first or 0, last


def valid_rows(conn: happybase.Connection) -> int:
    return sum(1 for t in ("vehicle", "face") for _ in conn.table(t).scan(batch_size=5000, columns=[b"r:capture_time"]))


def batch_seconds(log: Path, after: int) -> tuple[list[float], int]:
    """Durations of the job's non-empty batches numbered above ``after`` (from its JSON lines), and the last number."""
    durations, last = [], after
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith('{"batch"'):
            entry = json.loads(line)
            if entry["batch"] > after:
                durations.append(entry["seconds"])
                last = entry["batch"]
    return durations, last


def run_stage(stage: int, rate: int, args: argparse.Namespace, broker: BrokerProcess,
              conn: happybase.Connection, tmp: Path, before: int) -> dict[str, object]:
    since_ms = int(time.time() * 1000)
    _, last_batch = batch_seconds(tmp / "job.log", -1)
    summary = simulate(broker.bootstrap, tmp, "--rate", str(rate), "--duration", str(args.seconds), "--curve", "flat",
                       "--seed", str(stage + 1), "--first-sequence", str(stage * SEQUENCE_STRIDE),
                       "--failure-rate", "0.02", "--checkpoints", str(args.checkpoints), timeout=args.seconds + 120)
    produced = sum(summary["produced"].values())
    valid = produced - sum(summary["unrecognized"].values()) - sum(summary["malformed"].values())
    drained_at = time.monotonic()
    poll(lambda: valid_rows(conn) >= before + valid, args.drain_timeout, 0.5, f"{valid} rows at {rate}/s")
    drain_s = time.monotonic() - drained_at
    lat, first, last = latencies(conn, since_ms)
    durations, _ = batch_seconds(tmp / "job.log", last_batch)
    return {
        "batches": len(durations),
        "batch_s": {"p50": percentile([round(d * 1000) for d in durations], 50),
                    "max": round(max(durations) * 1000) if durations else None},
        "rate": rate,
        "produced": produced,
        "produced_per_s": summary["rate"],
        "valid_rows": valid,
        "rows_per_s": round(len(lat) / max((last - first) / 1000, 1e-3), 1),
        "drain_s": round(drain_s, 1),
        "latency_ms": {"p50": percentile(lat, 50), "p95": percentile(lat, 95), "p99": percentile(lat, 99),
                       "max": max(lat) if lat else None},
        "rows_total": before + valid,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rates", default="2000,3000,4000,6000")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--trigger-ms", type=int, default=0)
    parser.add_argument("--max-offsets-per-trigger", type=int, default=20_000)
    parser.add_argument("--max-p99", type=float, default=5000.0, help="ms: a rate above this is not sustained")
    parser.add_argument("--drain-timeout", type=float, default=180.0)
    parser.add_argument("--keep", action="store_true", help="keep the logs and data directory")
    parser.add_argument("--checkpoints", type=int, default=48, help="city size (checkpoints) of the simulator")
    parser.add_argument("--spark-workers", type=int, default=0, help="N > 0: a standalone cluster of N workers")
    parser.add_argument("--cold", action="store_true", help="with --spark-workers: pack the environment anew")
    args = parser.parse_args()
    rates = [int(r) for r in args.rates.split(",")]
    with tempfile.TemporaryDirectory(prefix="ingest-bench-") as tmpdir:
        tmp = Path(tempfile.mkdtemp(prefix="ingest-bench-")) if args.keep else Path(tmpdir)
        if args.keep:
            print(f"logs and data kept in {tmp}")
        broker = BrokerProcess(tmp / "bus").start()
        gateway = start_gateway(tmp / "hbase", "--log-level", "WARNING")
        job = None
        cluster = contextlib.ExitStack()
        try:
            settings = None
            if args.spark_workers:
                spark = cluster.enter_context(SparkCluster(tmp / "spark", workers=args.spark_workers))
                settings = SparkSettings(master=spark.url, cores_max=args.spark_workers)
                if args.cold:
                    shutil.rmtree(packaging.CACHE, ignore_errors=True)
                print(f"Spark standalone cluster {spark.url} with {args.spark_workers} one-core workers")
            conn = happybase.Connection("127.0.0.1", gateway.port, timeout=120_000)
            status = tmp / "status.json"
            started = time.monotonic()
            job = ingest_job(broker.bootstrap, gateway.port, tmp / "ckpt", tmp / "job.log", "--trigger-ms",
                             str(args.trigger_ms), "--max-offsets-per-trigger", str(args.max_offsets_per_trigger),
                             "--status-file", str(status), settings=settings)
            poll(lambda: status.exists() or job.poll() is not None, 300, 0.5, "the ingest job's first batch")
            if job.poll() is not None:
                print((tmp / "job.log").read_text()[-3000:], file=sys.stderr)
                return 1
            print(f"ingest job ready after {time.monotonic() - started:.1f}s (submit to the first batch: spark start-up"
                  f"{', packing' if args.cold else ''} and batch 0)")
            print(f"{'rate/s':>7} {'sent/s':>8} {'rows/s':>8} {'p50 ms':>7} {'p95 ms':>7} {'p99 ms':>7} "
                  f"{'max ms':>7} {'drain s':>7} {'batches':>7} {'batch p50/max ms':>16}")
            # Warm-up: the first batches pay for Python worker start-up and JIT; measure the steady state.
            warm = run_stage(len(rates), rates[0], argparse.Namespace(**{**vars(args), "seconds": 10.0}), broker,
                             conn, tmp, 0)
            print(f"warm-up {warm['produced']} records at {rates[0]}/s: p99 {warm['latency_ms']['p99']} ms")  # type: ignore[index]
            before = int(warm["rows_total"])  # type: ignore[call-overload]
            results = []
            for stage, rate in enumerate(rates):
                try:
                    result = run_stage(stage, rate, args, broker, conn, tmp, before)
                except TimeoutError as exc:
                    print(f"{rate:>7} not sustained: {exc}")
                    break
                results.append(result)
                before = int(result["rows_total"])  # type: ignore[call-overload]
                lat = result["latency_ms"]
                print(f"{rate:>7} {result['produced_per_s']:>8} {result['rows_per_s']:>8} {lat['p50']:>7} "  # type: ignore[index]
                      f"{lat['p95']:>7} {lat['p99']:>7} {lat['max']:>7} {result['drain_s']:>7} {result['batches']:>7} "  # type: ignore[index]
                      f"{result['batch_s']['p50']:>8}/{result['batch_s']['max']}", flush=True)  # type: ignore[index]
                if lat["p99"] is None or lat["p99"] > args.max_p99:  # type: ignore[index]
                    break
            load = os.getloadavg()
            print(f"load average now {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (2 cores; other work on the machine "
                  "shows up directly in these latencies)")
            print(json.dumps({"results": results, "tables": list(captures.TABLES), "loadavg": load}))
        finally:
            if job is not None:
                job.stop(30)
            cluster.close()
            gateway.kill()
            broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
