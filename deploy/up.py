"""`make up`: start the solution on one machine with embedded defaults and say where to look.

Today that is the bus (a single-node combined broker+controller) and, when it is installed, the
embedded HBase Thrift gateway. Each service is a child process; Ctrl-C or SIGTERM stops them all.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time
from pathlib import Path


def _services(data_dir: Path, args: argparse.Namespace) -> list[tuple[str, list[str], str]]:
    py = sys.executable
    services = [
        (
            "bus broker",
            [py, "-m", "bus", "broker", "--override", f"log.dirs={data_dir / 'bus'}",
             "--override", f"listeners=PLAINTEXT://{args.host}:{args.kafka_port},CONTROLLER://{args.host}:"
                           f"{args.kafka_port + 1}",
             "--override", f"controller.quorum.voters=1@{args.host}:{args.kafka_port + 1}"],
            f"Kafka bootstrap server: {args.host}:{args.kafka_port}  (e.g. kcat -L -b {args.host}:{args.kafka_port})",
        ),
    ]
    gateway = Path(__file__).parent / "hbase_gateway" / "__main__.py"
    if gateway.exists():
        services.append((
            "hbase gateway",
            [py, "-m", "deploy.hbase_gateway", "--host", args.host, "--port", str(args.hbase_port),
             "--data-dir", str(data_dir / "hbase")],
            f"HBase Thrift (happybase): {args.host}:{args.hbase_port}",
        ))
    return services


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy.up", description=__doc__)
    parser.add_argument("--data-dir", default="data", help="where every service keeps its data")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--kafka-port", type=int, default=9092)
    parser.add_argument("--hbase-port", type=int, default=9090)
    args = parser.parse_args(argv)
    data_dir = Path(args.data_dir).resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    children: list[subprocess.Popen[bytes]] = []
    lines = []
    for name, cmd, where in _services(data_dir, args):
        log = open(data_dir / f"{name.replace(' ', '-')}.log", "ab")  # noqa: SIM115 - owned by the child
        children.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT))
        lines.append(f"  {name:<14} {where}")
    time.sleep(1.5)
    failed = [c for c in children if c.poll() is not None]
    if failed:
        print(f"a service failed to start; see the logs in {data_dir}", file=sys.stderr)
        for child in children:
            child.terminate()
        return 1
    print("The security-video data bus is up:\n" + "\n".join(lines))
    print(f"  logs and data   {data_dir}\nPress Ctrl-C to stop.", flush=True)
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while not stopping and all(c.poll() is None for c in children):
        time.sleep(0.5)
    for child in children:
        if child.poll() is None:
            child.terminate()
    for child in children:
        try:
            child.wait(15)
        except subprocess.TimeoutExpired:
            child.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
