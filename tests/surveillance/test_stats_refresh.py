"""Stage B meets an event of a statistic before its command log has tailed the command: it reads the
control topic to its end there and then (``CommandLog.poll_to_end``), against a real broker process."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import Producer

from contracts.config import Config
from contracts.records import encode
from contracts.surveillance import stat_from_json
from deploy.processes.broker import BrokerProcess
from surveillance.settings import Settings
from surveillance.stats_events import StatEvent, version
from surveillance.stats_windows_stage import WindowedStats
from surveillance.streams import COMPACTED, CommandLog, TopicSpec, ensure_topics

T0 = 1_800_000_000_000


def test_an_event_ahead_of_its_command_makes_stage_b_read_the_commands_to_their_end(
        broker: BrokerProcess, tmp_path: Path) -> None:
    settings = Settings.from_config(Config({"bus": {"bootstrap_servers": broker.bootstrap},
                                            "map": {"path": str(tmp_path / "map.json")},
                                            "surveillance": {"instance": "test"}}))
    topic = settings.topics.control_stats
    ensure_topics(settings, {topic: TopicSpec(2, COMPACTED)})
    stage = WindowedStats(settings)
    commands = CommandLog(settings, topic, "test")
    try:
        assert commands.catch_up(stage.apply) == 0
        stage.refresh = lambda: commands.poll_to_end(stage.apply)
        windows = stage.state((settings.topics.stat_events, 0)).windows
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        for n in range(20):   # on both partitions; the one the event needs comes last
            value = {"stat_id": f"s{n}", "measure": "vehicle_count", "group_by": "city", "window_s": 10 + n}
            producer.produce(topic, encode(value), f"s{n}".encode(), partition=n % 2)
        assert producer.flush(10) == 0
        wanted = stat_from_json({"stat_id": "s19", "measure": "vehicle_count", "group_by": "city", "window_s": 29})
        event = StatEvent("s19", version(wanted), "city", T0, None, None, ("capture.vehicle", 0, 1, 0))
        assert stage.known(windows, event)                       # read there and then, no tailing in between
        assert len(stage.commands) == 20 and windows.stats["s19"].window_ms == 29_000
        stale = StatEvent("s19", "0" * 16, "city", T0, None, None, ("capture.vehicle", 0, 2, 0))
        assert not stage.known(windows, stale)                   # a definition that is not (or no longer) there
    finally:
        commands.close()
