"""``python -m spark_jobs.submit JOB [--config F] [--master URL] [--conf K=V ...] [-- JOB_ARGS]``: start one of the
solution's Spark jobs by hand, the way `make up` starts it (:func:`spark_jobs.launch.submit`).

JOB is ``ingest_captures`` (the capture ingest; the DR site's loaders are this job with the DR site's config),
``video_ingest`` (the video analysis service, which submits ``video_synopsis`` per task) or ``video_synopsis`` (one
batch job). ``--master`` and ``--conf`` override ``[spark]`` of the config. With a ``spark://`` master the executors
get the project's code and a packed Python environment (built once and cached, ``spark_jobs/packaging.py``), so a
worker host needs only Java, Spark and the base Python interpreter.

It runs in the foreground: the job's output goes to this terminal, SIGTERM or Ctrl-C stops the job gracefully (its
driver finishes the batch in hand), and the exit status is the job's. Before submitting to a ``spark://`` master it
checks that the master answers, so a wrong URL fails at once and names it instead of Spark's minute of retries.

Exit status: the job's; 2 for bad arguments or a master that does not answer; 1 when packing the environment failed.
"""

from __future__ import annotations

import argparse
import signal
import socket
import sys
import threading
from types import FrameType
from urllib.parse import urlsplit

from contracts.config import add_config_flag, preparse_config
from spark_jobs import launch, packaging

JOBS = {
    "ingest_captures": "ingest_captures.py",
    "video_ingest": "video_ingest.py",
    "video_synopsis": "video_synopsis.py",
}
MASTER_CONNECT_TIMEOUT_S = 5.0


def _conf(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, not {text!r}")
    return key.strip(), value


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, list[str], launch.SparkSettings]:
    argv = list(sys.argv[1:] if argv is None else argv)
    job_args: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, job_args = argv[:at], argv[at + 1:]
    config = preparse_config(argv)
    parser = argparse.ArgumentParser(prog="python -m spark_jobs.submit", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("job", choices=sorted(JOBS), metavar="JOB", help=f"one of {', '.join(sorted(JOBS))}")
    add_config_flag(parser)
    parser.add_argument("--master", help="Spark master URL (default: [spark] master of the config)")
    parser.add_argument("--conf", type=_conf, action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark property, as spark-submit's --conf (repeatable; over [spark] conf)")
    args = parser.parse_args(argv)
    section = dict(config.section("spark"))
    if args.master:
        section["master"] = args.master
    section["conf"] = {**dict(section.get("conf", {}) or {}), **dict(args.conf)}
    try:
        settings = launch.SparkSettings.from_config(section)
    except ValueError as exc:
        parser.error(f"[spark] in {config.path}: {exc}")
    if args.config is not None and "--config" not in job_args:
        job_args = ["--config", str(args.config), *job_args]
    try:
        check_master(settings.master)
    except ConnectionError as exc:
        parser.error(str(exc))
    return args, job_args, settings


def check_master(master: str) -> None:
    """A ``spark://`` master must accept a connection (every one of a list of standby masters may be tried)."""
    if not master.startswith("spark://"):
        return
    errors = []
    for hostport in master.removeprefix("spark://").split(","):
        parts = urlsplit(f"//{hostport}")
        try:
            host, port = parts.hostname or "", parts.port or 7077
        except ValueError:
            raise ConnectionError(f"Spark master {master}: {hostport!r} is not host:port") from None
        try:
            with socket.create_connection((host, port), timeout=MASTER_CONNECT_TIMEOUT_S):
                return
        except OSError as exc:
            errors.append(f"{host}:{port}: {exc.strerror or exc}")
    raise ConnectionError(f"Spark master {master} does not answer ({'; '.join(errors)})")


def main(argv: list[str] | None = None) -> int:
    args, job_args, settings = parse_args(argv)
    try:
        job = launch.submit(launch.ROOT / "spark_jobs" / JOBS[args.job], job_args, settings)
    except packaging.PackagingError as exc:
        print(f"spark_jobs.submit: {exc}", file=sys.stderr)
        return 1

    stopping = threading.Event()

    def stop(signum: int, _frame: FrameType | None) -> None:
        signal.signal(signum, signal.SIG_DFL)  # a second Ctrl-C kills at once
        stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while (code := job.poll()) is None:
        if stopping.wait(0.5):
            code = job.stop()
            break
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main())
