"""The mirror's two directions: each copies only while the active-site record names its source site (a fresh mirror
each time the site becomes active, stopped when the record names the other one), the flags that say so, the handover
syncs a switchover leaves for the direction that starts after it, and make up's two mirror services."""

from __future__ import annotations

import datetime as dt
import logging
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from contracts import active_site
from contracts.config import Config
from contracts.processes import ROOT
from deploy.dr_site import DrSettings, Service, mirror_service, reverse_mirror_service
from deploy.processes.broker import BrokerProcess
from dr_mirror import cli, direction
from dr_mirror.formats import OffsetSync
from dr_mirror.metrics import MirrorMetrics
from dr_mirror.offset_map import OffsetMap
from dr_mirror.settings import Settings, SettingsError
from dr_mirror.syncs import SyncStore, write_handover
from testkit.mirror import write_properties
from tests.dr._support import wait_until

LAG = ("dr_mirror_partition_lag_records", {"topic": "capture.vehicle", "partition": "0"})
AGE = ("dr_mirror_partition_lag_seconds", {"topic": "capture.vehicle", "partition": "0"})


class FakeMirror:
    """Stands for ``Mirror(settings, metrics, stop).run()``: claims a lag on one partition and copies until told to
    stop."""

    def __init__(self, metrics: MirrorMetrics) -> None:
        self.metrics = metrics
        self.started = 0
        self.running = threading.Event()

    def __call__(self, stop: threading.Event) -> None:
        self.started += 1
        self.metrics.lag.labels("capture.vehicle", "0").set(5)
        self.metrics.lag_seconds.labels("capture.vehicle", "0").set_function(lambda: 12.0)
        self.running.set()
        stop.wait()
        self.running.clear()


def _name(tmp_path: Path, site: str, switching_to: str | None = None) -> None:
    active_site.write(tmp_path, active_site.ActiveSite(site, dt.datetime.now(dt.UTC), "test", switching_to))


def _value(metrics: MirrorMetrics, sample: tuple[str, dict[str, str]]) -> float | None:
    return metrics.registry.get_sample_value(*sample)


def _follow(tmp_path: Path, site: str, stopping: threading.Event) -> tuple[FakeMirror, threading.Thread]:
    metrics = MirrorMetrics()
    mirror = FakeMirror(metrics)
    gate = active_site.Gate(site, active_site.path(tmp_path), 0.01, while_switching=True)
    flow = f"{site} -> {'dr' if site == 'primary' else 'primary'}"
    thread = threading.Thread(target=direction.follow, args=(gate, mirror, metrics, stopping, flow, 0.01), daemon=True)
    thread.start()
    return mirror, thread


def test_each_direction_copies_while_its_source_site_is_active(tmp_path: Path,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=direction.__name__)
    stopping = threading.Event()
    forward, forward_thread = _follow(tmp_path, "primary", stopping)
    back, back_thread = _follow(tmp_path, "dr", stopping)
    try:
        # no record yet: the primary runs the business
        wait_until(forward.running.is_set, 10, "the mirror from the primary to copy")
        assert _value(forward.metrics, ("dr_mirror_copying", {})) == 1 and _value(forward.metrics, LAG) == 5
        _name(tmp_path, "primary", switching_to="dr")  # a switchover drains: the primary's mirror goes on copying
        stopping.wait(0.3)
        assert forward.running.is_set() and forward.started == 1 and back.started == 0
        _name(tmp_path, "dr")
        wait_until(lambda: not forward.running.is_set() and back.running.is_set(), 10, "the directions to swap")
        # the direction standing by claims no lag (the age would grow for ever from its last state)
        assert _value(forward.metrics, ("dr_mirror_copying", {})) == 0
        assert _value(forward.metrics, LAG) is None and _value(forward.metrics, AGE) is None
        assert _value(back.metrics, ("dr_mirror_copying", {})) == 1
        _name(tmp_path, "primary")  # failback: a fresh mirror (it resumes from the target's log ends)
        wait_until(lambda: forward.running.is_set() and not back.running.is_set(), 10, "the directions to swap back")
        assert (forward.started, back.started) == (2, 1)
    finally:
        stopping.set()
        forward_thread.join(5)
        back_thread.join(5)
    assert not forward_thread.is_alive() and not back_thread.is_alive() and not forward.running.is_set()
    said = [r.getMessage() for r in caplog.records]
    nothing = f"the primary is active (no record yet at {active_site.path(tmp_path)})"
    assert f"copying primary -> dr: {nothing}" in said and f"standing by: {nothing}" in said
    assert "standing by: dr is active" in said and "copying dr -> primary: dr is active" in said
    assert said.count("copying primary -> dr: the primary is active") == 1  # the failback


def test_a_mirror_failing_while_it_copies_stops_the_process_and_one_stopped_does_not(tmp_path: Path) -> None:
    gate = active_site.Gate("primary", active_site.path(tmp_path), 0.01, while_switching=True)
    metrics = MirrorMetrics()

    def failing(stop: threading.Event) -> None:
        raise RuntimeError("dr-mirror-task-0 failed")

    with pytest.raises(RuntimeError, match="task-0 failed"):
        direction.follow(gate, failing, metrics, threading.Event(), "primary -> dr", 0.01)
    assert _value(metrics, ("dr_mirror_copying", {})) == 0

    stopping = threading.Event()

    def asked_to_stop(stop: threading.Event) -> None:
        """A mirror waiting for an unreachable cluster raises its error once asked to stop."""
        stopping.set()
        stop.wait()
        raise ConnectionError("127.0.0.1:1 refused")

    direction.follow(gate, asked_to_stop, metrics, stopping, "primary -> dr", 0.01)  # returns: a clean stop


# -- the flags ----------------------------------------------------------------------------------------------------


def _gate(tmp_path: Path, *flags: str) -> active_site.Gate | None:
    props = write_properties(tmp_path / "mm2.properties", "a:9092", "b:19092")
    args = cli.parser().parse_args(["--config", str(props), *flags])
    return cli.gate_from(args, cli.settings_from(args))


def test_the_site_flags_go_together_and_name_the_flows_source(tmp_path: Path) -> None:
    record = str(active_site.path(tmp_path))
    assert _gate(tmp_path) is None  # without them the mirror always copies, as before
    gate = _gate(tmp_path, "--site-record", record, "--source-site", "primary")
    assert gate is not None and (gate.site, gate.record, gate.while_switching) == ("primary", Path(record), True)
    with pytest.raises(SettingsError) as refused:
        _gate(tmp_path, "--site-record", record)
    assert refused.value.key == "--source-site"
    with pytest.raises(SettingsError) as refused:
        _gate(tmp_path, "--source-site", "primary")
    assert refused.value.key == "--site-record"
    with pytest.raises(SettingsError, match="primary->dr") as refused:  # it would write into the active site
        _gate(tmp_path, "--site-record", record, "--source-site", "dr")
    assert refused.value.key == "--source-site"


def test_one_site_flag_without_the_other_exits_2_naming_it(tmp_path: Path) -> None:
    props = write_properties(tmp_path / "mm2.properties", "a:9092", "b:19092")
    done = subprocess.run([sys.executable, "-m", "dr_mirror", "--config", str(props), "--site-record",
                           str(active_site.path(tmp_path))], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--source-site: is needed with --site-record" in done.stderr, done.stderr


# -- handover syncs -----------------------------------------------------------------------------------------------


def test_the_direction_started_after_a_switchover_resumes_where_the_handover_says(shared_broker: BrokerProcess) -> None:
    """dr -> primary after a switchover to the DR site: the primary's log ends (the target) differ from the DR
    site's (the source), and an earlier run of that direction left syncs of its own."""
    settings = Settings("dr", "primary", {"bootstrap.servers": shared_broker.bootstrap},
                        {"bootstrap.servers": "127.0.0.1:1"}, topics=(".*",), topics_exclude=())
    earlier = SyncStore(settings.source_cluster, settings.offset_syncs_topic, MirrorMetrics())
    try:
        earlier.write([OffsetSync("capture.vehicle", 0, 17, 10)])  # the topic exists from that run
    finally:
        earlier.close()
    pairs = {("capture.vehicle", 0): (120, 100), ("capture.vehicle", 1): (0, 0), ("capture.face", 2): (7, 4000)}
    write_handover(settings, pairs)
    write_handover(settings, {})  # nothing to hand over: nothing written
    store = SyncStore(settings.source_cluster, settings.offset_syncs_topic, MirrorMetrics())
    try:
        known = store.load()
    finally:
        store.close()
    assert settings.offset_syncs_topic == "mm2-offset-syncs.primary.internal"
    for key, (source, target) in pairs.items():
        offsets = OffsetMap()  # as the worker builds it at start-up
        for upstream, downstream in known[key]:
            offsets.add(upstream, downstream)
        assert offsets.resume(target) == source, key
        assert offsets.resume(target + 3) == source + 3  # and on from there, as it copies


def test_write_handover_creates_the_offset_syncs_topic(shared_broker: BrokerProcess) -> None:
    settings = Settings("primary", "dr", {"bootstrap.servers": "127.0.0.1:1"},
                        {"bootstrap.servers": shared_broker.bootstrap}, topics=(".*",), topics_exclude=(),
                        offset_syncs_location="target")
    write_handover(settings, {("capture.face", 0): (5, 3)})
    store = SyncStore(settings.target_cluster, "mm2-offset-syncs.dr.internal", MirrorMetrics())
    try:
        assert store.load() == {("capture.face", 0): [(5, 3)]}
    finally:
        store.close()


# -- make up's two mirrors ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("service", "source", "target", "port"), [
    (mirror_service, "primary", "dr", 9420), (reverse_mirror_service, "dr", "primary", 9422)])
def test_make_up_runs_a_mirror_each_way_on_the_site_record(tmp_path: Path, service: Callable[..., Service],
                                                           source: str, target: str, port: int) -> None:
    config = Config({"dr": {"bootstrap_servers": "127.0.0.1:19092", "mirror_metrics_port": 9420,
                            "reverse_mirror_metrics_port": 9422}})
    dr = DrSettings.from_config(config, tmp_path)
    _name, command, _where = service(config, dr, "127.0.0.1:9092")
    args = cli.parser().parse_args(command[3:])
    settings = cli.settings_from(args)
    gate = cli.gate_from(args, settings)
    assert gate is not None and (gate.site, gate.record) == (source, active_site.path(tmp_path))
    assert (settings.source, settings.target, args.metrics_port) == (source, target, port)
    addresses = {"primary": "127.0.0.1:9092", "dr": "127.0.0.1:19092"}
    assert (settings.source_bootstrap, settings.target_bootstrap) == (addresses[source], addresses[target])
    # MM2's names for that direction: syncs at the source about the target, checkpoints at the target
    assert settings.offset_syncs_topic == f"mm2-offset-syncs.{target}.internal"
    assert settings.checkpoints_topic == f"{source}.checkpoints.internal"
    assert args.config.stat().st_mode & 0o077 == 0  # it may hold the mirror principal's password


def test_the_reverse_mirrors_metrics_port_defaults_to_9322(tmp_path: Path) -> None:
    assert DrSettings.from_config(Config({}), tmp_path).reverse_metrics_port == 9322
