"""How `make up` lays out its processes: the surveillance service's watch stage in a process of its own at normal
priority, cloned plates and statistics in another one at a lower priority (issue 33), and what Prometheus scrapes."""

from __future__ import annotations

import subprocess
import sys

from contracts.config import Config
from contracts.processes import ROOT
from deploy.prometheus.scrape import targets
from deploy.surveillance import services


def test_the_watch_stage_runs_alone_and_the_analytics_stages_at_a_lower_priority() -> None:
    config = Config({"surveillance": {"analytics_nice": 7, "metrics_port": 9400, "analytics_metrics_port": 9401}})
    commands = {name: cmd for name, cmd, _ in services(config)}
    watch, analytics = commands["surveillance"], commands["surveillance analytics"]
    assert watch[watch.index("--stages") + 1] == "watch" and "--nice" not in watch
    assert analytics[analytics.index("--stages") + 1] == "cloned,stats"
    assert analytics[analytics.index("--nice") + 1] == "7"
    assert analytics[analytics.index("--metrics-port") + 1] == "9401"
    scraped = {t.address for t in targets(config, "127.0.0.1", 8000) if t.job == "surveillance"}
    assert scraped == {"127.0.0.1:9400", "127.0.0.1:9401"}  # Prometheus scrapes both processes


def test_a_nice_value_out_of_range_is_refused() -> None:
    result = subprocess.run([sys.executable, "-m", "surveillance", "--nice", "25"], cwd=ROOT, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 2 and "--nice must be 0 to 19" in result.stderr


def test_prometheus_scrapes_the_dr_image_copier_only_when_the_dr_site_runs() -> None:
    config = Config({"dr": {"images_metrics_port": 9421}})
    assert "dr_images" not in {t.job for t in targets(config, "127.0.0.1", 8000)}
    copier = [t.address for t in targets(config, "127.0.0.1", 8000, dr_site=True) if t.job == "dr_images"]
    assert copier == ["127.0.0.1:9421"]


def test_prometheus_scrapes_both_consoles_when_the_dr_site_runs() -> None:
    config = Config({"dr": {"console_port": 18400}, "console": {"tls_cert": "c.pem"}})
    alone = [t.address for t in targets(config, "127.0.0.1", 8000) if t.job == "console"]
    both = [(t.address, t.scheme) for t in targets(config, "127.0.0.1", 8000, dr_site=True) if t.job == "console"]
    assert alone == ["127.0.0.1:8000"]
    assert both == [("127.0.0.1:18400", "https"), ("127.0.0.1:8000", "https")]
