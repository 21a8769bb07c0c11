"""Capture search latency over a large data set: multi-condition vehicle search (a script, not a test).

Loads ``--captures`` vehicle captures (default 1,000,000 over ``--hours``, default one day, of a 24-checkpoint city)
into an HBase gateway as the ingest writes them (``write_puts`` of ``rows_for_valid``: main row and every index
row, in chunks, with a progress bar) under ``--data-dir``, which a later run reuses when it already holds the same
load (loading a million takes minutes). Fewer captures over fewer hours give the per-hour density of a bigger load
in less loading time (100,000 over 2.4 hours: a million a day's), which is what the one-hour searches' cost
depends on. Then starts a broker (the audit trail) and ``python -m web`` with its real settings on that gateway,
and measures over HTTP with keep-alive, each a p50/p99 of ``--requests`` requests (``limit=50``):

* one district, one hour, two attribute conditions (vehicle colour and type): ``vehicle_by_district``;
  target p99 <= 300 ms;
* a plate pattern (``浙A*`` and two characters, one hour): every district's ``vehicle_by_district``, merged;
* a brand alone, one hour: ``vehicle_by_brand``;
* a vehicle colour alone over the whole load (at most a day): every district merged, a rare colour spends the
  scan budget (partial pages).

"partial pages" counts the measured pages the scan budget cut short (fewer than ``limit`` hits and a ``next``): their
latency is that of reading the whole budget, and their items are a partial answer (the search goes on with
``next``). A run with fewer than 1,000,000 captures is labelled partial. ``--only faces`` runs the face search's
measurements instead (``benchmarks/search_faces.py``); without ``--only``, both parts run.

    .venv/bin/python benchmarks/search.py [--captures 1000000] [--hours 24] [--requests 200] [--only vehicles|faces]
        [--verify N]

``--verify N`` then checks N random one-hour searches of those kinds, each paged to its end, against a brute scan of
the main table read whole: the index answers must equal it at this scale too (the tests check it on 20,000).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import happybase  # noqa: E402
import httpx  # noqa: E402
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn  # noqa: E402
from rich.table import Table  # noqa: E402

from benchmarks.console import _write, out, synthesize, timed  # noqa: E402
from contracts.records import Kind, epoch_ms, format_time  # noqa: E402
from contracts.tables import captures as layout  # noqa: E402
from deploy.processes.broker import BrokerProcess  # noqa: E402
from deploy.processes.console import Backing, run_cli, start_console  # noqa: E402
from deploy.processes.gateway import Gateway, start_gateway  # noqa: E402
from ingest.city import DISTRICTS, build_city  # noqa: E402
from spark_jobs.capture_writer import close_cached_clients  # noqa: E402
from testkit.search import brute, every_page  # noqa: E402
from testkit.web_data import T0, create_tables, valid_records, writer  # noqa: E402
from web.services.vehicle_search import SCAN_BUDGET  # noqa: E402

CHECKPOINTS = 24  # the simulator's default city
FULL = 1_000_000
LIMIT = 50
REASON = "benchmark case 2026-0029"
VEHICLES = "/api/v1/captures/vehicles"
HOUR_MS = 3_600_000
DAY_MS = 86_400_000


@dataclass(frozen=True)
class Loaded:
    pool: list[dict[str, Any]]
    """The records the captures are copies of (the searches draw their conditions from them)."""
    span_ms: int
    """The captures are spread evenly over [T0, T0 + span_ms)."""


def ensure_loaded(data_dir: Path, gateway: Gateway, captures: int, hours: float,
                  chunk: int = 2000) -> tuple[Loaded, dict[str, Any]]:
    """What was loaded, and how the load went (``reused`` when ``data_dir`` already held this load: its
    ``loaded.json`` is written only once every row is in)."""
    marker = data_dir / "loaded.json"
    pool = [record for kind, record in valid_records(3000, seed=7, city=build_city(7, CHECKPOINTS), face_share=0.0)
            if kind is Kind.VEHICLE]
    span_ms = round(hours * HOUR_MS)
    if marker.exists():
        return Loaded(pool, span_ms), {**json.loads(marker.read_text()), "reused": True}
    create_tables(gateway.port)
    settings = writer(gateway.port)
    started = time.monotonic()
    batch: list[tuple[Kind, dict[str, Any]]] = []
    done = 0
    with Progress(TextColumn("loading vehicle captures"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[rate]}"), TimeRemainingColumn(), console=out) as progress:
        task = progress.add_task("load", total=captures, rate="")
        for n, (kind, record) in enumerate(synthesize(captures, [(Kind.VEHICLE, record) for record in pool], seed=11)):
            moment = T0 + timedelta(milliseconds=n * span_ms / captures)  # synthesize spreads them over a day
            batch.append((kind, {**record, "capture_time": format_time(moment)}))
            if len(batch) == chunk:
                done += _write(batch, settings, set())
                progress.update(task, completed=done, rate=f"{done / (time.monotonic() - started):,.0f} captures/s")
        done += _write(batch, settings, set())
        progress.update(task, completed=done)
    close_cached_clients()
    elapsed = time.monotonic() - started
    loaded = {"captures": captures, "hours": hours, "seconds": round(elapsed, 1),
              "captures_per_s": round(captures / elapsed)}
    marker.write_text(json.dumps(loaded))
    return Loaded(pool, span_ms), {**loaded, "reused": False}


def _window(rng: random.Random, loaded: Loaded, span_ms: int) -> dict[str, str]:
    """A random ``span_ms`` (at most the whole load) inside the loaded span, as the API's from/to."""
    span_ms = min(span_ms, loaded.span_ms)
    start = T0 + timedelta(milliseconds=rng.randrange(0, loaded.span_ms - span_ms + 1))
    return {"from": start.isoformat(), "to": (start + timedelta(milliseconds=span_ms)).isoformat()}


def _measure(client: httpx.Client, requests: int, make: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``timed``'s figures, plus how many of the measured pages the scan budget cut short (fewer than ``limit``
    hits and a ``next``: partial pages) and how many ended the range (``next`` null)."""
    answered: list[httpx.Response] = []
    client.event_hooks = {**client.event_hooks, "response": [answered.append]}
    try:
        result = timed(client, requests, lambda: {**make(), "limit": LIMIT, "reason": REASON}, VEHICLES)
    finally:
        client.event_hooks = {**client.event_hooks, "response": []}
    bodies = [response.json() for response in answered[-requests:]]
    return {**result, "partial_pages": sum(len(b["items"]) < LIMIT and b["next"] is not None for b in bodies),
            "last_pages": sum(b["next"] is None for b in bodies)}


def district_hour_two_attributes(client: httpx.Client, loaded: Loaded, requests: int,
                                 rng: random.Random) -> dict[str, Any]:
    def make() -> dict[str, Any]:
        sample = rng.choice(loaded.pool)
        return {**_window(rng, loaded, HOUR_MS), "district": rng.choice(DISTRICTS)[0],
                "vehicle_color": sample["vehicle_color"], "vehicle_type": sample["vehicle_type"]}
    return _measure(client, requests, make)


def plate_pattern_hour(client: httpx.Client, loaded: Loaded, requests: int, rng: random.Random) -> dict[str, Any]:
    alphabet = "ABCDEFGHJKLMNPQRSTUVWXYZ0123456789"
    return _measure(client, requests, lambda: {**_window(rng, loaded, HOUR_MS),
                                               "plate": f"浙A*{rng.choice(alphabet)}{rng.choice(alphabet)}"})


def brand_hour(client: httpx.Client, loaded: Loaded, requests: int, rng: random.Random) -> dict[str, Any]:
    return _measure(client, requests,
                    lambda: {**_window(rng, loaded, HOUR_MS), "brand": rng.choice(loaded.pool)["vehicle_brand"]})


def colour_day(client: httpx.Client, loaded: Loaded, requests: int, rng: random.Random) -> dict[str, Any]:
    return _measure(client, requests,
                    lambda: {**_window(rng, loaded, DAY_MS), "vehicle_color": rng.choice(loaded.pool)["vehicle_color"]})


Measurement = Callable[[httpx.Client, Loaded, int, random.Random], dict[str, Any]]
MEASUREMENTS: dict[str, list[tuple[str, Measurement, int | None]]] = {
    "vehicles": [
        ("district + colour + type, 1 h", district_hour_two_attributes, 300),
        ("plate pattern 浙A*xy, 1 h", plate_pattern_hour, None),
        ("brand only, 1 h", brand_hour, None),
        ("colour only, whole load (<= 1 day)", colour_day, None),
    ],
    "faces": [],
}
"""Per part (``--only``): (label, function, target p99 ms or None)."""


VERIFIED_FIELDS = ("record_id", "checkpoint_id", "lane", "plate_number", "plate_color", "vehicle_color", "vehicle_type",
                   "vehicle_brand")


def main_table(gateway: Gateway) -> list[dict[str, Any]]:
    """Every vehicle of the main table (the brute scan's input; the search itself never reads it this way), newest
    first, each with its capture time in ms as ``_ms``."""
    conn = happybase.Connection("127.0.0.1", gateway.port, timeout=120_000)
    records = []
    try:
        with Progress(TextColumn("reading the main table for the brute scan"), MofNCompleteColumn(),
                      console=out) as progress:
            task = progress.add_task("scan", total=None)
            for _key, cells in conn.table(Kind.VEHICLE.value).scan(columns=[layout.RECORD_COLUMN], batch_size=5000):
                record = layout.read_record(cells)
                records.append({**{k: record[k] for k in VERIFIED_FIELDS}, "_ms": epoch_ms(record["capture_time"])})
                if len(records) % 20_000 == 0:
                    progress.update(task, completed=len(records))
    finally:
        conn.close()
    return sorted(records, key=lambda r: (-r["_ms"], r["record_id"]))


def verify(client: httpx.Client, gateway: Gateway, loaded: Loaded, count: int) -> dict[str, Any]:
    """``count`` random one-hour searches of the measured kinds, each paged to its end (limit 500), against a brute
    scan of the main table: the answers at this scale must be exactly the brute scan's."""
    records = main_table(gateway)
    rng = random.Random("verify")
    alphabet = "ABCDEFGHJKLMNPQRSTUVWXYZ0123456789"

    def query() -> dict[str, Any]:
        sample = rng.choice(loaded.pool)
        kinds = (
            {"district": rng.choice(DISTRICTS)[0], "vehicle_color": sample["vehicle_color"],
             "vehicle_type": sample["vehicle_type"]},
            {"plate": f"浙A*{rng.choice(alphabet)}{rng.choice(alphabet)}"},
            {"brand": sample["vehicle_brand"]},
            {"vehicle_color": sample["vehicle_color"], "lane": 1},
        )
        return {**_window(rng, loaded, HOUR_MS), **rng.choice(kinds), "limit": 500}

    wrong, hits, pages = [], 0, 0
    for _ in range(count):
        params = query()
        bodies = every_page(client, params)
        got = [item["record_id"] for body in bodies for item in body["items"]]
        expected = brute(records, params)
        hits, pages = hits + len(expected), pages + len(bodies)
        if got != expected:
            wrong.append({"query": params, "got": len(got), "expected": len(expected)})
    return {"main_table_rows": len(records), "queries": count, "pages": pages, "hits": hits, "wrong": wrong}


def report(results: dict[str, Any]) -> None:
    partial_run = results["captures"] < FULL
    per_day = round(results["captures"] * 24 / results["hours"])
    table = Table(title=f"capture search latency, {results['captures']:,} captures over {results['hours']} h "
                        f"({per_day:,} a day's density){' (PARTIAL: fewer than 1,000,000)' if partial_run else ''}")
    for column in ("search", "p50 ms", "p99 ms", "max ms", "target p99", "items/page", "partial pages"):
        table.add_column(column)
    for label, r in results["searches"].items():
        table.add_row(label, str(r["p50_ms"]), str(r["p99_ms"]), str(r["max_ms"]),
                      f"<= {r['target']}" if r["target"] else "-", str(r["mean_items"]),
                      f"{r['partial_pages']}/{r['requests']}")
    out.print(table)
    if "verified" in results:
        checked = results["verified"]
        out.print(f"brute-scan check: {checked['queries']} searches ({checked['pages']} pages, "
                  f"{checked['hits']:,} hits) over {checked['main_table_rows']:,} captures: "
                  f"{len(checked['wrong'])} differ")
    load = os.getloadavg()
    out.print(f"load average {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} on {os.cpu_count()} cores "
              "(other work on the machine inflates the latencies)")
    print(json.dumps({**results, "partial_run": partial_run, "loadavg": load}, ensure_ascii=False))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--captures", type=int, default=FULL, help="vehicle captures to load (default 1,000,000)")
    parser.add_argument("--hours", type=float, default=24.0, help="the span the captures are spread over (default 24)")
    parser.add_argument("--requests", type=int, default=200, help="measured requests per search")
    parser.add_argument("--only", choices=sorted(MEASUREMENTS), help="one part of the benchmark")
    parser.add_argument("--verify", type=int, default=0, metavar="N",
                        help="also check N random searches, paged to their end, against a brute scan of the main table")
    parser.add_argument("--data-dir", type=Path, default=ROOT / "data" / "bench-search",
                        help="where the loaded gateway lives (reused by the next run with the same --captures)")
    args = parser.parse_args()
    if args.captures < 20_000:
        parser.error("--captures must be at least 20,000 (the synthesized day keeps one plate at 10,000 captures)")
    if not 1 <= args.hours <= 24 * 31:
        parser.error("--hours must be between 1 and 744")
    parts = [args.only] if args.only else list(MEASUREMENTS)
    if parts == ["faces"]:
        return faces()  # faces need no vehicle load
    data_dir: Path = args.data_dir
    marker = data_dir / "loaded.json"
    if marker.exists() and [json.loads(marker.read_text()).get(k) for k in ("captures", "hours")] != [
            args.captures, args.hours]:
        shutil.rmtree(data_dir)  # another load: start afresh
    data_dir.mkdir(parents=True, exist_ok=True)
    build_city(7, CHECKPOINTS).save(data_dir / "deployment_map.json")
    with tempfile.TemporaryDirectory(prefix="search-bench-") as tmp:
        root = Path(tmp)
        shutil.copy(data_dir / "deployment_map.json", root / "deployment_map.json")
        gateway = start_gateway(data_dir / "hbase", log_dir=root)
        broker = BrokerProcess(root / "broker").start()
        console = None
        try:
            data, loaded = ensure_loaded(data_dir, gateway, args.captures, args.hours)
            out.print(f"{'reused' if loaded['reused'] else 'loaded'} {loaded['captures']:,} vehicle captures "
                      f"(loading took {loaded['seconds']} s, {loaded['captures_per_s']:,} captures/s, 5 rows each)")
            console = start_console(Backing(broker, gateway, root))
            added = run_cli(console.config, "users", "add", "bench", "--role", "viewer", stdin="bench-password-1\n")
            if added.returncode != 0 and "already exists" not in added.stderr:  # a reused data dir keeps its users
                raise RuntimeError(added.stderr)
            token = console.login("bench", "bench-password-1").json()["access_token"]
            searches: dict[str, Any] = {}
            with httpx.Client(base_url=console.url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as client:
                for part in parts:
                    for label, measure, target in MEASUREMENTS[part]:
                        out.print(f"measuring {label} ...")
                        searches[label] = {**measure(client, data, args.requests, random.Random(label)),
                                           "target": target}
                verified = {"verified": verify(client, gateway, data, args.verify)} if args.verify else {}
            report({"captures": args.captures, "hours": args.hours, "load": loaded, "searches": searches,
                    "scan_budget_rows": SCAN_BUDGET, **verified})
        except BaseException:
            if console is not None:
                out.print(console.log()[-3000:])
            raise
        finally:
            if console is not None:
                console.stop()
            broker.stop()
            gateway.terminate()  # a clean stop: the next run reuses its data
    return faces() if "faces" in parts else 0


def faces() -> int:
    """``--only faces``: similar-face search p50/p99 and recall over 500,000 faces, and the face index's loader from
    HBase (``benchmarks/search_faces.py``, with its defaults: its data are faces, the vehicle load plays no part)."""
    import search_faces  # beside this file: its own script too

    search_faces.main([])
    return 0


if __name__ == "__main__":
    sys.exit(main())
