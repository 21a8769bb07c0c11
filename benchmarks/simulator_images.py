"""Simulator throughput with capture images on versus off, on this machine (a script, not a test).

Starts a broker and the embedded object store, then runs ``python -m ingest.simulate`` (flat curve):
* as fast as it goes (``--rate`` far above what it reaches) for ``--count`` records, images off and on: the
  ceiling records/s of each;
* at the default rate (``--at-rate``, 200/s) for ``--seconds``, images off and on: whether it keeps up, and the CPU
  it costs (the simulator's, and the store's) as a share of one core.
Also reports the stored images' mean size per kind. Prints one JSON object per run, then a summary.

    .venv/bin/python benchmarks/simulator_images.py [--count 3000] [--seconds 20] [--at-rate 200]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from deploy.object_store import ObjectStore  # noqa: E402
from deploy.processes.broker import BrokerProcess  # noqa: E402
from ingest.images.keys import BUCKET  # noqa: E402


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(broker: BrokerProcess, store: ObjectStore, tmp: Path, images: bool, *args: str) -> dict[str, Any]:
    """One simulator run; its summary plus the CPU seconds it and the store used."""
    weed = psutil.Process(store.proc.pid) if store.proc else None
    weed_before = sum(weed.cpu_times()[:2]) if weed else 0.0
    before, started = children_cpu(), time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "ingest.simulate", "--bootstrap-server", broker.bootstrap, "--map",
         str(tmp / "map.json"), "--status-interval", "0", "--curve", "flat", "--endpoint", store.url,
         "--s3-credentials", str(store.credentials_file("simulator")), "--images" if images else "--no-images", *args],
        cwd=ROOT, capture_output=True, check=True)
    wall = time.monotonic() - started
    summary = json.loads(out.stdout.decode().strip().splitlines()[-1])
    return {"images": images, "args": list(args), "records": sum(summary["produced"].values()),
            "rate": summary["rate"], "seconds": summary["seconds"], "wall_s": round(wall, 2),
            "simulator_cpu_s": round(children_cpu() - before, 2),
            "store_cpu_s": round(sum(weed.cpu_times()[:2]) - weed_before, 2) if weed else None,
            "image_outcomes": summary["images"]}


def sizes(store: ObjectStore) -> dict[str, float]:
    """Mean stored image size (KB) per kind."""
    client, out = store.client(), {}
    for kind in ("vehicle", "face"):
        found = [o.size for o in client.list_objects(BUCKET, prefix=f"{kind}/", recursive=True)]
        out[kind] = round(sum(found) / len(found) / 1024, 1) if found else 0.0
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=3000, help="records per ceiling run")
    parser.add_argument("--seconds", type=float, default=20.0, help="length of each run at --at-rate")
    parser.add_argument("--at-rate", type=float, default=200.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        broker = BrokerProcess(tmp / "bus").start()
        try:
            with ObjectStore(tmp / "s3", port=0) as store:
                results = []
                for images in (False, True):
                    results.append(run(broker, store, tmp, images, "--count", str(args.count), "--rate", "1000000"))
                    print(json.dumps(results[-1]), flush=True)
                for images in (False, True):
                    results.append(run(broker, store, tmp, images, "--duration", str(args.seconds), "--rate",
                                       str(args.at_rate)))
                    print(json.dumps(results[-1]), flush=True)
                kb = sizes(store)
        finally:
            broker.stop()
    off, on, paced_off, paced_on = results
    print(f"\nceiling: images off {off['rate']:.0f} records/s, on {on['rate']:.0f} records/s "
          f"({on['rate'] / off['rate']:.1%} of off)")
    for paced in (paced_off, paced_on):
        busy = paced["simulator_cpu_s"] / paced["wall_s"]
        store_busy = (paced["store_cpu_s"] or 0.0) / paced["wall_s"]
        print(f"at {args.at_rate:.0f}/s, images {'on ' if paced['images'] else 'off'}: {paced['rate']:.0f} records/s, "
              f"simulator {busy:.0%} of a core, object store {store_busy:.0%} of a core")
    print(f"stored image size: vehicle {kb['vehicle']} KB, face {kb['face']} KB (mean)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
