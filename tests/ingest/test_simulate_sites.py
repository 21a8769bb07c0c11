"""The devices follow the active site (``[site] record``): the site they produce to, holding while a switchover
drains, and what the site they leave refused produced again at the new one, in order, each record reported once.

No servers: each site's bus is a :class:`SiteBus` that reports outcomes when polled, refusing while fenced.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from pathlib import Path

import pytest

from contracts import active_site
from contracts.active_site import SiteRecord
from contracts.config import Config
from contracts.topics import Topics
from ingest import simulate
from ingest.city import build_city
from ingest.producer import Delivered
from ingest.simulate import Simulator, SiteFollower, StatusLine
from ingest.traffic import Traffic, TrafficConfig

NOW = dt.datetime(2026, 12, 1, 8, 0, tzinfo=dt.UTC)
REFUSED = "Broker: Topic authorization failed"


class SiteBus:
    """One site's bus: when polled it writes what it was given in order, or refuses all of it while :attr:`fenced`,
    and reports the outcomes newest first (reports from several partitions come in any order). Once the client knows
    its topics are refused (:attr:`refused_at_once`), producing raises."""

    def __init__(self) -> None:
        self.fenced = False
        self.refused_at_once = False
        self.lost = False
        """Answers nothing: the site's room is gone (an unplanned switchover)."""
        self.written: list[bytes] = []
        self._pending: list[tuple[bytes, Delivered]] = []

    def ensure_topics(self, partitions: Mapping[str, int], timeout: float = 15.0) -> None:
        pass

    def produce(self, topic: str, key: bytes, value: bytes, on_delivery: Delivered) -> None:
        if self.refused_at_once:
            raise RuntimeError(REFUSED)
        self._pending.append((value, on_delivery))

    def poll(self, timeout: float = 0.0) -> None:
        if self.lost:
            return
        pending, self._pending = self._pending, []
        if not self.fenced:
            self.written += [value for value, _ in pending]
        for _, on_delivery in reversed(pending):
            on_delivery(REFUSED if self.fenced else None)

    def flush(self, timeout: float) -> int:
        self.poll()
        return len(self._pending)

    def abandon(self) -> None:
        pending, self._pending = self._pending, []
        for _, on_delivery in pending:
            on_delivery("Local: Purged in flight")


class Record:
    """The active-site record in a temporary directory, rewritten as a switchover would."""

    def __init__(self, tmp_path: Path) -> None:
        self.data_dir = tmp_path
        self.path = active_site.path(tmp_path)

    def say(self, active: str, switching_to: str | None = None) -> None:
        active_site.write(self.data_dir, active_site.ActiveSite(active, NOW, "test", switching_to))


@pytest.fixture
def record(tmp_path: Path) -> Record:
    return Record(tmp_path)


def follower(record: Record, buses: dict[str, SiteBus]) -> SiteFollower:
    sites = SiteRecord(record.path, interval_s=0)
    site, _ = sites.read()
    return SiteFollower(sites, site, buses[site], buses.__getitem__)


def test_the_record_names_the_site_and_says_when_to_hold(record: Record) -> None:
    sites = SiteRecord(record.path, interval_s=0)
    assert sites.read() == ("primary", False)  # no record yet: the primary
    record.say("primary", switching_to="dr")
    assert sites.read() == ("primary", True)
    record.say("dr")
    assert sites.read() == ("dr", False)
    record.path.write_text("{half a rec")
    assert sites.read() == ("dr", False)  # the last answer stands


def test_the_record_is_read_at_most_once_an_interval(record: Record) -> None:
    sites = SiteRecord(record.path, interval_s=3600)
    assert sites.read() == ("primary", False)
    record.say("dr")
    assert sites.read() == ("primary", False)


def test_only_a_config_with_a_site_follows_one(tmp_path: Path) -> None:
    assert SiteRecord.from_config(Config({})) is None
    sites = SiteRecord.from_config(Config({"site": {"name": "primary", "record": str(tmp_path / "r.json")}}))
    assert sites is not None and sites.record == tmp_path / "r.json"
    with pytest.raises(ValueError, match=r"site\.record"):
        SiteRecord.from_config(Config({"site": {"name": "primary"}}, Path("s.toml")))


def test_the_devices_reach_the_site_the_record_names_with_its_client_settings(
        record: Record, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clients = tmp_path / "dr-clients"
    clients.mkdir()
    properties = clients / "simulator.properties"
    properties.write_text("bootstrap.servers=dr-from-file:19094\n")
    properties.chmod(0o600)
    config = tmp_path / "solution.toml"
    config.write_text(f'[bus]\nbootstrap_servers = "primary:9092"\n'
                      f'[dr]\nbootstrap_servers = "dr:19092"\nclient_properties_dir = "{clients}"\n'
                      f'[site]\nname = "primary"\nrecord = "{record.path}"\n')
    opened: list[dict[str, str]] = []

    class Opened(Exception):
        """Stops the simulator once its producer's settings are known."""

    def open_producer(settings: dict[str, str]) -> None:
        opened.append(settings)
        raise Opened

    monkeypatch.setattr(simulate, "open_producer", open_producer)
    argv = ["--config", str(config), "--map", str(tmp_path / "map.json"), "--no-images", "--bootstrap-server", "b:1"]
    for site in ("primary", "dr"):
        record.say(site)
        with pytest.raises(Opened):
            simulate.main(argv)
    assert opened == [{"bootstrap.servers": "b:1"}, {"bootstrap.servers": "dr-from-file:19094"}]  # the flag: primary


def test_what_the_old_site_refused_goes_first_to_the_new_one_in_order_and_each_is_reported_once(
        record: Record) -> None:
    buses = {"primary": SiteBus(), "dr": SiteBus()}
    devices = follower(record, buses)
    outcomes: dict[bytes, list[str | None]] = {}

    def produce(*values: bytes) -> None:
        for value in values:
            devices.produce("capture.vehicle", b"cp-1", value, lambda error, v=value: outcomes.setdefault(
                v, []).append(error))

    assert devices.follow()
    produce(b"a0", b"a1")
    devices.poll()
    buses["primary"].fenced = True  # the switchover fences the primary's writes
    produce(b"r0", b"r1")
    devices.poll()
    produce(b"r2")  # still on its way when the devices move: refused at the flush
    buses["primary"].refused_at_once = True
    produce(b"r3")
    record.say("primary", switching_to="dr")
    assert not devices.follow() and devices.site == "primary"
    produce(b"h0")  # while holding (the run ending): kept, not sent
    assert buses["primary"].written == [b"a0", b"a1"] and not buses["dr"].written
    record.say("dr")
    assert devices.follow() and devices.site == "dr"
    produce(b"n0")
    devices.flush(1.0)
    assert buses["primary"].written == [b"a0", b"a1"]
    assert buses["dr"].written == [b"r0", b"r1", b"r2", b"r3", b"h0", b"n0"]  # the refused and held first, in order
    assert outcomes == {value: [None] for value in (b"a0", b"a1", b"r0", b"r1", b"r2", b"r3", b"h0", b"n0")}
    assert devices.resent == 4  # the held one was never sent before
    assert devices.acked == {"primary": {"capture.vehicle": 2}, "dr": {"capture.vehicle": 6}}


def test_a_record_no_site_took_is_reported_failed_once_at_the_end(record: Record) -> None:
    buses = {"primary": SiteBus(), "dr": SiteBus()}
    devices = follower(record, buses)
    outcomes: list[str | None] = []
    devices.follow()
    buses["primary"].fenced = True
    devices.produce("capture.face", b"cp-2", b"refused", outcomes.append)
    devices.poll()
    assert outcomes == []  # kept for the next site, not reported yet
    assert devices.flush(1.0) == 0
    assert outcomes == [REFUSED]
    assert devices.resent == 0 and devices.acked == {"primary": {}, "dr": {}}


def test_holding_devices_generate_and_send_nothing_not_even_heartbeats(record: Record, tmp_path: Path) -> None:
    buses = {"primary": SiteBus(), "dr": SiteBus()}
    record.say("primary", switching_to="dr")
    devices = follower(record, buses)
    sim = Simulator(Traffic(build_city(7, 24), TrafficConfig(seed=7)), devices, Topics(), rate=20_000,
                    heartbeat_s=0.01)
    with (tmp_path / "status").open("w") as out:
        elapsed = sim.run(count=None, duration=0.3, status=StatusLine(out, interval=0.01))
    assert "holding at primary" in (tmp_path / "status").read_text()
    assert sim.emitted == 0 and buses["primary"].written == buses["dr"].written == []
    devices.flush(1.0)  # the final heartbeats were held: no site took them
    summary = sim.summary(elapsed, seed=7)
    assert summary["heartbeats"] == 0 and summary["failed"] == len(sim.traffic.city.devices) - sum(
        sim.traffic.device_state(ip, elapsed) == "offline" for ip in sim.traffic.city.devices)
    assert summary["errors"][0].startswith("held:")
    assert summary["sites"] == {site: {"capture.vehicle": 0, "capture.face": 0, "device.heartbeat": 0}
                                for site in ("primary", "dr")}
    assert summary["resent"] == 0


def test_without_a_site_the_summary_is_as_before() -> None:
    sim = Simulator(Traffic(build_city(7, 24), TrafficConfig(seed=7)), SiteBus(), Topics(), rate=1, heartbeat_s=1)
    assert sim.sites is None
    assert "sites" not in sim.summary(1.0, seed=7) and "resent" not in sim.summary(1.0, seed=7)


def test_a_site_that_does_not_answer_is_given_up_and_what_it_had_not_acknowledged_goes_to_the_new_one(
        record: Record, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(simulate, "MOVE_FLUSH_S", 0.0)
    monkeypatch.setattr(simulate, "MOVE_GIVE_UP_S", 0.0)
    buses = {"primary": SiteBus(), "dr": SiteBus()}
    devices = follower(record, buses)
    outcomes: list[str | None] = []
    devices.produce("t", b"k", b"acked", outcomes.append)
    devices.poll()
    buses["primary"].lost = True  # the primary's room is lost with a record on its way
    devices.produce("t", b"k", b"in flight", outcomes.append)
    record.say("dr")  # an unplanned switchover
    assert devices.follow()
    devices.flush(0)
    assert buses["primary"].written == [b"acked"] and buses["dr"].written == [b"in flight"]
    assert outcomes == [None, None] and devices.resent == 1
