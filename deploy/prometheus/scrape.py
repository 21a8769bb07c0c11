"""The scrape configuration of the solution as `make up` runs it: one job per kind of process, every target on
loopback, the rules of this folder loaded.

Targets come from the solution config, the same keys the processes read: the broker's `[bus] metrics_port`
(Kafka's metric names), `[monitoring] metrics_port`, `[surveillance] metrics_port`, the mirrors' `[dr]
mirror_metrics_port` and `reverse_mirror_metrics_port` (the one back, dr -> primary), the object store's
`[object_storage] metrics_port` (SeaweedFS's own metrics), the HBase gateway's `[hbase] metrics_port` (requests and
latency per Thrift method) and the console's `/metrics` on its own port; the Spark jobs are seen through the broker
(their consumer groups' lag) and the monitor (ingest latency and throughput from `ingest.stats`). A port of 0 leaves
its job out.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contracts.config import Config

RULES_DIR = Path(__file__).parent
SCRAPE_INTERVAL = "15s"
EVALUATION_INTERVAL = "15s"


@dataclass(frozen=True)
class Target:
    job: str
    address: str  # host:port
    path: str = "/metrics"
    scheme: str = "http"


def rule_files() -> list[Path]:
    """The rule files of this folder (`*rules*.yml`, not their tests)."""
    return sorted(p for p in RULES_DIR.glob("*rules*.yml") if not p.name.endswith("_test.yml"))


def targets(config: Config, host: str, console_port: int, dr_site: bool = False) -> list[Target]:
    """What `make up` starts that serves Prometheus metrics, by job (``dr_site``: `--dr-site`'s image copier and
    console too)."""
    ports = (
        *((("dr_images", config.get("dr", "images_metrics_port", 9321)),
           ("console", config.get("dr", "console_port", 18000))) if dr_site else ()),
        ("bus", config.get("bus", "metrics_port", 0)),
        ("monitor", config.get("monitoring", "metrics_port", 9310)),
        ("surveillance", config.get("surveillance", "metrics_port", 9330)),  # the watch stage's process
        ("surveillance", config.get("surveillance", "analytics_metrics_port", 9331)),  # cloned plates, statistics
        ("mirror", config.get("dr", "mirror_metrics_port", 9320)),
        ("mirror", config.get("dr", "reverse_mirror_metrics_port", 9322)),  # no lag figures while it stands by
        ("object_store", config.get("object_storage", "metrics_port", 0)),
        ("hbase", config.get("hbase", "metrics_port", 0)),
        ("console", console_port),
    )
    console_scheme = "https" if config.get("console", "tls_cert", "") else "http"
    return [Target(job, f"{host}:{int(port)}", scheme=console_scheme if job == "console" else "http")
            for job, port in ports if int(port)]


def scrape_config(found: list[Target], ca_file: Path | None = None) -> dict[str, Any]:
    """prometheus.yml as a mapping (written as JSON, which is YAML); an HTTPS target is checked against
    ``ca_file`` (make up's CA)."""
    jobs: dict[str, list[Target]] = {}
    for target in found:
        jobs.setdefault(target.job, []).append(target)
    return {
        "global": {"scrape_interval": SCRAPE_INTERVAL, "evaluation_interval": EVALUATION_INTERVAL,
                   "external_labels": {"site": "primary"}},
        "rule_files": [str(path) for path in rule_files()],
        "scrape_configs": [{"job_name": job, "metrics_path": listed[0].path, "scheme": listed[0].scheme,
                            **({"tls_config": {"ca_file": str(ca_file)}}
                               if listed[0].scheme == "https" and ca_file else {}),
                            "static_configs": [{"targets": [t.address for t in listed]}]}
                           for job, listed in jobs.items()],
    }


def command(config_file: Path, data_dir: Path, listen: str, binary: str = "prometheus") -> list[str]:
    """Debian's `prometheus` on `listen` (host:port) with `config_file`, its TSDB in `data_dir` (two days kept)."""
    return [binary, f"--config.file={config_file}", f"--storage.tsdb.path={data_dir}",
            f"--web.listen-address={listen}", "--storage.tsdb.retention.time=2d", "--log.format=json"]
