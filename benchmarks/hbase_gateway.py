"""Throughput of the embedded HBase gateway as happybase sees it (a script, not a test).

Starts ``python -m deploy.hbase_gateway`` as a separate process on a free port with a temporary
data dir (durable, as in production), then measures with happybase:

* batch puts: rows of 3 columns x 20 bytes, one mutateRows call per 1,000 rows;
* full scans: ``table.scan(batch_size=1000)``, i.e. scannerGetList of 1,000 rows per call.

Row keys carry a hash prefix, as the pipeline's keys do, so inserts land all over the B-tree.

    .venv/bin/python benchmarks/hbase_gateway.py [--rows 200000] [--clients 1] [--transport framed]
"""

from __future__ import annotations

import argparse
import hashlib
import multiprocessing as mp
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import happybase

from contracts.processes import spawn

VALUE = b"v" * 20
COLUMNS = (b"cf:a", b"cf:b", b"cf:c")
BATCH_ROWS = 1000


def row_key(i: int) -> bytes:
    return hashlib.md5(b"%d" % i).hexdigest()[:4].encode() + b"-%010d" % i


def start_gateway(data_dir: str, transport: str, protocol: str) -> tuple[subprocess.Popen[bytes], int]:
    proc = spawn(
        [
            *(sys.executable, "-m", "deploy.hbase_gateway", "--port", "0", "--data-dir", data_dir),
            *("--transport", transport, "--protocol", protocol, "--log-level", "WARNING"),
        ],
        subprocess.PIPE,
        stderr=None,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().decode()
    match = re.search(r"listening on .*:(\d+)$", line.strip())
    if not match:
        proc.kill()
        raise SystemExit(f"gateway did not start: {line!r}")
    return proc, int(match.group(1))


def connect(port: int, transport: str, protocol: str) -> happybase.Connection:
    return happybase.Connection("127.0.0.1", port, transport=transport, protocol=protocol)


def put_rows(port: int, transport: str, protocol: str, first: int, count: int, start_at: float) -> float:
    """Put rows made beforehand (key hashing is not what is measured); returns the time taken."""
    table = connect(port, transport, protocol).table("bench")
    rows = [(row_key(i), dict.fromkeys(COLUMNS, VALUE)) for i in range(first, first + count)]
    time.sleep(max(0.0, start_at - time.time()))  # all clients start together
    t0 = time.perf_counter()
    with table.batch(batch_size=BATCH_ROWS * len(COLUMNS)) as batch:
        for key, data in rows:
            batch.put(key, data)
    return time.perf_counter() - t0


def scan_rows(port: int, transport: str, protocol: str, start: bytes | None, stop: bytes | None) -> int:
    table = connect(port, transport, protocol).table("bench")
    return sum(1 for _ in table.scan(row_start=start, row_stop=stop, batch_size=BATCH_ROWS))


def parallel(target: object, jobs: list[tuple[object, ...]]) -> list[object]:
    if len(jobs) == 1:
        return [target(*jobs[0])]  # type: ignore[operator]
    with mp.get_context("fork").Pool(len(jobs)) as pool:
        return pool.starmap(target, jobs)  # type: ignore[arg-type]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--clients", type=int, default=1, help="client processes for puts and scans")
    parser.add_argument("--transport", choices=("buffered", "framed"), default="buffered")
    parser.add_argument("--protocol", choices=("binary", "compact"), default="binary")
    parser.add_argument("--scans", type=int, default=3, help="full scans to run (best and mean reported)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="hbase-bench-") as data_dir:
        proc, port = start_gateway(data_dir, args.transport, args.protocol)
        try:
            admin = connect(port, args.transport, args.protocol)
            admin.create_table("bench", {"cf": {"max_versions": 1}})
            share = args.rows // args.clients
            start_at = time.time() + 0.5 + share / 500_000
            jobs = [(port, args.transport, args.protocol, c * share, share, start_at) for c in range(args.clients)]
            put_s = max(parallel(put_rows, jobs))  # type: ignore[type-var]
            total = share * args.clients
            print(f"batch put : {total:,} rows in {put_s:.2f} s = {total / put_s:,.0f} rows/s (durable)")

            bounds = [None] + [b"%x" % (16 * c // args.clients) for c in range(1, args.clients)] + [None]
            scan_jobs = [(port, args.transport, args.protocol, bounds[c], bounds[c + 1]) for c in range(args.clients)]
            rates = []
            for _ in range(args.scans):
                t0 = time.perf_counter()
                scanned = sum(parallel(scan_rows, scan_jobs))  # type: ignore[misc]
                scan_s = time.perf_counter() - t0
                assert scanned == total, f"scan returned {scanned} rows, expected {total}"
                rates.append(scanned / scan_s)
            print(
                f"full scan : {total:,} rows, best {max(rates):,.0f} rows/s, mean {sum(rates) / len(rates):,.0f} rows/s"
            )
            size = sum(f.stat().st_size for f in Path(data_dir).iterdir())
            print(f"data dir  : {size / 2**20:.1f} MiB ({args.transport}/{args.protocol}, {args.clients} client(s))")
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
    if os.environ.get("BENCH_STRICT") and (total / put_s < 30_000 or max(rates) < 80_000):
        raise SystemExit("below target (30,000 rows/s put, 80,000 rows/s scan)")


if __name__ == "__main__":
    main()
