"""Run `make up` (``python -m deploy.up``) as a real process on ports and a data directory of the caller's own, for
the tests and the benchmarks: `write_config` writes its solution config, `start_up` starts it and waits for its
"Press Ctrl-C" line, `down` is `make down`; `bus_settings` and `console_client` reach what it started as an operator
does (the secured bus, the HTTPS console).
"""

from __future__ import annotations

import json
import os
import selectors
import ssl
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
import tomli_w
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, TopicPartition

from contracts import bus_client
from contracts.alerts import FIRING
from contracts.config import load as load_config
from contracts.processes import spawn
from contracts.topics import Topics

MARK_ENV = "UP_TEST_MARK"
"""An environment variable set on `make up` with a value of the caller's own: every process of that run (the
children, the Spark jobs' JVMs and their Python workers, a process re-parented to init) inherits it, so
`marked` finds them all."""

MAKE_UP_PORTS = ("bus", "controller", "hbase", "s3", "console", "monitor", "surveillance", "analytics", "dr", "drc",
                 "mm", "mmr")


def write_config(tmp_path: Path, ports: dict[str, int], bus: str | None = None, shipped: bool = False) -> Path:
    """A solution config of the caller's own: every listener on its own free port (`ports`, MAKE_UP_PORTS and
    optionally "drh", the DR site's HBase, "drcon" its console, "drs" its object store, "dri" its image copier's
    metrics, "busm" the broker's, "s3m" the object store's and "hbm" the HBase gateway's metrics, "prom" Prometheus,
    "sparkm" and "sparkui" a `--spark-workers` cluster's master and its UI) and the deployment map in `tmp_path`, so
    that two make-up tests running at once share no port and no file. `bus`: the `[bus] bootstrap_servers` (default
    the "bus" port). `shipped`: everything else as `contracts/solution.toml` ships it (its rates, rules, priorities:
    `make up` as a user runs it), its object-store credentials under ``tmp_path/data``; else only what is written
    here, the rest the code's defaults (a config given to `make up` replaces the shipped one)."""
    bootstrap = bus or f"127.0.0.1:{ports['bus']}"
    optional = {"busm": ("bus", "metrics_port"), "s3m": ("object_storage", "metrics_port"),
                "hbm": ("hbase", "metrics_port"),
                "prom": ("prometheus", "port"), "drh": ("dr", "hbase_port"), "drcon": ("dr", "console_port"),
                "sparkm": ("spark", "standalone_port"), "sparkui": ("spark", "standalone_ui_port")}
    sections: dict[str, dict[str, object]] = {
        "bus": {"bootstrap_servers": bootstrap},
        "hbase": {"host": "127.0.0.1", "port": ports["hbase"]},
        "object_storage": {"endpoint": f"127.0.0.1:{ports['s3']}"},  # keys: make up's DATA/secrets
        "console": {"port": ports["console"]},
        "monitoring": {"metrics_port": ports["monitor"]},
        "surveillance": {"metrics_port": ports["surveillance"], "analytics_metrics_port": ports["analytics"]},
        "map": {"path": str(tmp_path / "deployment_map.json")},
        "dr": {"bootstrap_servers": f"127.0.0.1:{ports['dr']}", "controller_port": ports["drc"],
               "mirror_metrics_port": ports["mm"], "reverse_mirror_metrics_port": ports["mmr"]},
        "prometheus": {},
        "spark": {},
    }
    for name, (section, key) in optional.items():
        if name in ports:
            sections[section][key] = ports[name]
    if "drs" in ports:  # the DR site's object store (a port pair: deploy.object_store.free_port_pair) and copier
        sections["dr"]["s3_endpoint"] = f"127.0.0.1:{ports['drs']}"
    if "dri" in ports:
        sections["dr"]["images_metrics_port"] = ports["dri"]
    if shipped:
        base = load_config(None).data
        sections["object_storage"]["credentials_dir"] = str(tmp_path / "data" / "secrets")
        given = {(name, key) for name, values in sections.items() for key in values}
        sections = {**base, **{name: {**base.get(name, {}), **values} for name, values in sections.items()}}
        for name, values in sections.items():  # the shipped fixed metrics ports: off unless `ports` gives them
            if isinstance(values, dict):
                values.update({key: 0 for key in values if key.endswith("metrics_port") and (name, key) not in given})
    config = tmp_path / "solution.toml"
    config.write_text(tomli_w.dumps({name: values for name, values in sections.items() if values}))
    return config


def start_up(config: Path, data_dir: Path, ports: dict[str, int], *flags: str, pipeline: bool = False,
             env: dict[str, str] | None = None, timeout: float = 120) -> tuple[subprocess.Popen[bytes], str]:
    """Start deploy.up (with `flags` added; `--no-pipeline` unless `pipeline`; `env` added to the environment) and
    return it with everything it printed up to its "Press Ctrl-C" line.

    The pipe is read with os.read: readline() on the buffered stream would keep lines that arrived in one
    write in its buffer, where select() cannot see them, and wait for output that never comes.
    """
    proc = spawn(
        [sys.executable, "-m", "deploy.up", "--config", str(config), "--data-dir", str(data_dir),
         *([] if pipeline else ["--no-pipeline"]),
         "--kafka-port", str(ports["bus"]), "--controller-port", str(ports["controller"]),
         "--hbase-port", str(ports["hbase"]),
         "--console-port", str(ports["console"]), *flags],
        subprocess.PIPE, env={**os.environ, **(env or {})})
    assert proc.stdout is not None
    output = ""
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        while "Press Ctrl-C" not in output:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise RuntimeError(f"make up did not come up:\n{output}")
            if selector.select(1):
                output += os.read(proc.stdout.fileno(), 65536).decode(errors="replace")
    return proc, output


def bus_settings(data_dir: Path, principal: str = "admin", section: str = bus_client.SECTION) -> dict[str, str]:
    """librdkafka settings for `principal` on make up's secured bus (from DATA/solution.toml and its properties);
    ``section="dr"``: on the DR site's bus."""
    return bus_client.librdkafka(load_config(data_dir / "solution.toml"), principal, section=section)


def console_client(data_dir: Path, port: int, **kwargs: object) -> httpx.Client:
    """An HTTPS client of make up's console, trusting make up's CA (DATA/secrets/ca.pem)."""
    trust = ssl.create_default_context(cafile=str(data_dir / "secrets" / "ca.pem"))
    return httpx.Client(base_url=f"https://127.0.0.1:{port}", verify=trust, timeout=30, **kwargs)  # type: ignore[arg-type]


def down(data_dir: Path, proc: subprocess.Popen[bytes], timeout: float = 90) -> str:
    """`make down`, and what it printed; we reap `make up` meanwhile (an unreaped child stays a zombie that `--down`
    sees alive)."""
    stopper = spawn([sys.executable, "-m", "deploy.up", "--data-dir", str(data_dir), "--down"], subprocess.PIPE)
    if (code := proc.wait(timeout)) != 0:
        raise RuntimeError(f"make up exited {code}")
    said = stopper.communicate(timeout=30)[0].decode(errors="replace")
    if stopper.returncode != 0:
        raise RuntimeError(said)
    return said


def marked(marker: str) -> list[psutil.Process]:
    """The live processes whose environment has ``MARK_ENV=marker``."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(MARK_ENV) == marker and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def read_topic(data_dir: Path, topic: str, timeout: float = 30) -> list[Message]:
    """Every record of `topic` on make up's bus, from its start to its end as of now, read as ``admin``."""
    consumer = Consumer({**bus_settings(data_dir), "group.id": f"make-up-reader-{os.getpid()}",
                         "enable.auto.commit": False, "enable.partition.eof": True, "log_level": 3})
    try:
        found = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
        if found is None or found.error is not None:  # never created: nothing was written to it
            return []
        partitions = found.partitions
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        records: list[Message] = []
        ended: set[int] = set()
        deadline = time.monotonic() + timeout
        while len(ended) < len(partitions):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic}: partitions {sorted(set(partitions) - ended)} not read to their end")
            for message in consumer.consume(1000, 1.0):
                if message.error() is None:
                    records.append(message)
                elif message.error().code() == KafkaError._PARTITION_EOF:
                    ended.add(message.partition())
        return records
    finally:
        consumer.close()


PIPELINE_ALERTS = frozenset({"IngestLatencyHigh", "IngestStalled", "MonitorLagging"})
"""The monitor's alerts on the pipeline itself (the shipped rules): on a fresh `make up` none may fire; the others
name devices the simulator breaks on purpose, or are hits."""


def fired_alerts(data_dir: Path) -> list[dict[str, Any]]:
    """The alerts the monitor fired during the run (each ``firing`` transition on the ``alerts`` topic)."""
    topic = Topics.from_config(load_config(data_dir / "solution.toml")).alerts
    return [alert for alert in (json.loads(m.value()) for m in read_topic(data_dir, topic))
            if alert.get("status") == FIRING]
