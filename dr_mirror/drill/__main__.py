"""`python -m dr_mirror.drill`: run one failover drill and write its report."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import dr_mirror.drill
from dr_mirror.drill.report import markdown
from dr_mirror.drill.scenarios import Drill


def parser() -> argparse.ArgumentParser:
    summary = (dr_mirror.drill.__doc__ or "").splitlines()[0]
    p = argparse.ArgumentParser(prog="python -m dr_mirror.drill", description=summary)
    p.add_argument("--scenario", required=True, choices=("primary-loss", "mirror-crash", "failback"))
    p.add_argument("--report", type=Path, default=None, help="directory for drill.json, drill.md, drill.png")
    p.add_argument("--config", type=Path, default=None, help="solution config (topics, Spark settings)")
    p.add_argument("--rate", type=float, default=300.0, help="capture records per second")
    p.add_argument("--seconds", type=float, default=15.0, help="steady load before the failure")
    p.add_argument("--after", type=float, default=10.0, help="load after the failover / restart / switch back")
    p.add_argument("--failover-after", type=float, default=5.0, help="seconds without acks before devices switch")
    p.add_argument("--replay", type=float, default=30.0, help="seconds of sent records devices re-send to DR")
    p.add_argument("--outage", type=float, default=5.0, help="seconds the mirror (or the primary room) stays down")
    p.add_argument("--mirror-behind", type=float, default=0.0,
                   help="primary-loss/failback: freeze the mirror (SIGSTOP) this many seconds before the room is "
                        "lost, so records the primary acknowledged are missing at DR (RPO > 0) and only the "
                        "devices' replay window (--replay) can bring them back")
    p.add_argument("--settle", type=float, default=180.0, help="at most this long for rows to land at the end")
    p.add_argument("--ready-timeout", type=float, default=600.0,
                   help="at most this long for both sites to be ready before the load starts (each ingest job's "
                        "first micro-batch: Spark starts slowly when loaded)")
    p.add_argument("--max-restarts", type=int, default=3,
                   help="restarts per ingest job or mirror that exits while the drill needs it (each one reported)")
    p.add_argument("--no-ingest", dest="ingest", action="store_false",
                   help="bus only: no HBase gateways and ingest jobs (faster; no row counts)")
    p.add_argument("--crash-dr-ingest", action="store_true",
                   help="also kill -9 the DR ingest job halfway through the steady load (the supervisor restarts it)")
    p.add_argument("--images", action="store_true",
                   help="mirror-crash: each site gets an object store, the devices put their images into the "
                        "primary's, the DR image copier (python -m dr_mirror.images) crashes with the mirror, and the "
                        "report counts the images missing at the DR site next to the records missing")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.images and args.scenario != "mirror-crash":
        parser().error("--images is measured in the mirror-crash scenario only (a lost primary takes its store "
                       "with it: the copier waits for it, as it should)")
    if args.report:  # the sites' data and every process's log stay with the report
        args.report.mkdir(parents=True, exist_ok=True)
        report = Drill(args, Path(tempfile.mkdtemp(prefix="work-", dir=args.report))).run()
    else:
        with tempfile.TemporaryDirectory(prefix="dr-drill-") as tmp:
            report = Drill(args, Path(tmp)).run()
    text = json.dumps(report, indent=2)
    print(text)
    if args.report:
        (args.report / "drill.json").write_text(text + "\n")
        (args.report / "drill.md").write_text(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
