"""Run `make up` (``python -m deploy.up``) as a real process on ports and a data directory of the caller's own, for
the tests and the benchmarks: `write_config` writes its solution config, `start_up` starts it and waits for its
"Press Ctrl-C" line, `down` is `make down`; `bus_settings` and `console_client` reach what it started as an operator
does (the secured bus, the HTTPS console).
"""

from __future__ import annotations

import os
import selectors
import ssl
import subprocess
import sys
import time
from pathlib import Path

import httpx
import tomli_w

from contracts import bus_client
from contracts.config import load as load_config
from contracts.processes import spawn

MAKE_UP_PORTS = ("bus", "controller", "hbase", "s3", "console", "monitor", "surveillance", "analytics", "dr", "drc",
                 "mm")


def write_config(tmp_path: Path, ports: dict[str, int], bus: str | None = None) -> Path:
    """A solution config of the caller's own: every listener on its own free port (`ports`, MAKE_UP_PORTS and
    optionally "drh", the DR site's HBase, "drs" its object store, "dri" its image copier's metrics, "busm" the
    broker's, "s3m" the object store's and "hbm" the HBase gateway's metrics, "prom" Prometheus, "sparkm" and "sparkui"
    a `--spark-workers` cluster's master and its UI) and the deployment
    map in `tmp_path`, so that two make-up tests running at once share no port and no file. `bus`: the `[bus]
    bootstrap_servers` (default the "bus" port)."""
    bootstrap = bus or f"127.0.0.1:{ports['bus']}"
    optional = {"busm": ("bus", "metrics_port"), "s3m": ("object_storage", "metrics_port"),
                "hbm": ("hbase", "metrics_port"),
                "prom": ("prometheus", "port"), "drh": ("dr", "hbase_port"),
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
               "mirror_metrics_port": ports["mm"]},
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
