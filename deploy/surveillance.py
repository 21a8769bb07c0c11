"""The surveillance slice under `make up`: the service, the hit loader, and watches on the simulator's targets.

`deploy/up.py` starts :func:`services` once the bus answers, and after the simulator started calls
:func:`watch_targets` with the simulator's seed: the simulator's recurring targets (plates and faces
that move along routes, ``ingest.traffic``) are a pure function of that seed and the config, so the
same targets are rebuilt here and put on the watchlist, and hits show on the console within a minute.
The watches have fixed ids (``demo-plate-1``, ...), so each `make up` replaces the previous run's on the
compacted topic instead of piling up watches on plates that no longer drive around.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import time
from pathlib import Path

import tomli_w

from contracts import bus_client
from contracts.config import Config
from contracts.records import encode, encode_feature, now_time
from contracts.surveillance import WatchCommand, watch_from_json
from ingest import simulate
from surveillance.settings import Settings
from surveillance.streams import COMPACTED, TopicSpec, ensure_topics, make_producer

PLATES, FACES = 2, 1
"""How many of the simulator's target plates and faces `make up` watches."""


def services(config: Config) -> list[tuple[str, list[str], str]]:
    """``python -m surveillance`` twice and ``python -m surveillance.loader``: (name, command, where to look).

    The watch stage has a process of its own at normal priority, the cloned-plate and statistics stages another one
    at ``[surveillance] analytics_nice``: a hit is worth intercepting only in well under a second, while statistics
    that fall a window behind catch up. On a saturated machine the kernel then takes the CPU from the statistics
    first (the stages' consumer groups are independent, so each process reads the captures on its own)."""
    flag = ["--config", str(config.path)] if config.path else []
    analytics_flag = ["--config", str(_without_site(config))] if config.path and config.section("site") else flag
    port = config.get("surveillance", "metrics_port", 9330)
    analytics_port = config.get("surveillance", "analytics_metrics_port", 9331)
    nice = config.get("surveillance", "analytics_nice", 10)

    def metrics(at: int) -> str:
        return f"  (metrics http://127.0.0.1:{at}/metrics)" if at else ""

    return [("surveillance", [sys.executable, "-m", "surveillance", *flag, "--stages", "watch"],
             f"watchlists -> surveillance.hits{metrics(port)}"),
            ("surveillance analytics",
             [sys.executable, "-m", "surveillance", *analytics_flag, "--stages", "cloned,stats", "--nice", str(nice),
              "--metrics-port", str(analytics_port)],
             f"cloned plates, live statistics -> surveillance.hits / .stats (nice {nice}){metrics(analytics_port)}"),
            ("hit loader", [sys.executable, "-m", "surveillance.loader", *flag],
             "surveillance.hits -> HBase surveillance_hit, surveillance_hit_by_time")]


def _without_site(config: Config) -> Path:
    """The config without ``[site]``, beside it, for the primary's cloned-plate and statistics process: it keeps
    running while the DR site is active (a second writer of the primary's hits and statistics beside the mirror back)
    because standing down it crashed once in a test run, in confluent-kafka (``CallState_get: Assertion cs != NULL``),
    which takes all of `make up` down; the watch process, which publishes the watch hits, stands down."""
    assert config.path is not None
    path = config.path.with_name("surveillance-analytics.toml")
    path.write_text(tomli_w.dumps({k: v for k, v in config.data.items() if k != "site"}))
    return path


def wait_for_map(path: Path, since: float, timeout: float = 30.0) -> bool:
    """True once the map at ``path`` was written at or after ``since`` (epoch s); False after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(FileNotFoundError):
            if path.stat().st_mtime >= since - 1:  # file systems keep mtimes to the second or coarser
                return True
        time.sleep(0.2)
    return False


def target_watches(config: Config, seed: int) -> list[WatchCommand]:
    """Watches on the first target plates and faces of the simulator started with ``seed`` and ``config``."""
    args, _config = simulate.parse_args(["--seed", str(seed), *(["--config", str(config.path)] if config.path else [])])
    _city, traffic = simulate.make_traffic(args)
    common = {"reason": "make up: a recurring target of the simulator", "requested_by": "make up",
              "requested_at": now_time()}
    plates = [t.plate for t in traffic.targets if t.plate][:PLATES]
    faces = [t.identity for t in traffic.targets if t.identity][:FACES]
    return ([watch_from_json({"watch_id": f"demo-plate-{n}", "kind": "plate", "plate": plate, **common})
             for n, plate in enumerate(plates, 1)]
            + [watch_from_json({"watch_id": f"demo-face-{n}", "kind": "face", "feature": encode_feature(identity),
                                "threshold": 0.8, **common})
               for n, identity in enumerate(faces, 1)])


def watch_targets(config: Config, seed: int | None) -> str:
    """Publish the target watches on ``control.watchlist`` (compacted); the status line for `make up`."""
    if seed is None:
        return f"  {'watchlist':<14} no simulator, no target watches"
    try:
        # make up puts them there as an operator would, through the console's identity: the service only reads them
        settings = dataclasses.replace(Settings.from_config(config), bus=bus_client.librdkafka(config, "console"))
        watches = target_watches(config, seed)
        topic = settings.topics.control_watchlist
        ensure_topics(settings, {topic: TopicSpec(1, COMPACTED)})
        producer = make_producer(settings, "make-up")
        for watch in watches:
            producer.produce(topic, encode(watch.to_json()), key=watch.watch_id.encode())
        if producer.flush(15):
            return f"  {'watchlist':<14} the target watches were not acknowledged by the bus"
    except Exception as exc:  # make up goes on without the demo watches, saying why
        return f"  {'watchlist':<14} no target watches ({type(exc).__name__}: {exc})"
    plates = ", ".join(w.plate or "" for w in watches if w.kind == "plate")
    return (f"  {'watchlist':<14} watching the simulator's target plates {plates} and "
            f"{sum(w.kind == 'face' for w in watches)} target face(s): hits on /watchlist within a minute")
