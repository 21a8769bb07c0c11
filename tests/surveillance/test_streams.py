"""The command log and the commit-after-ack loop (surveillance/streams.py) against a real broker process."""

from __future__ import annotations

import threading
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from contracts.config import Config
from deploy.processes.broker import BrokerProcess
from surveillance.settings import Settings
from surveillance.streams import (
    CommandLog,
    Output,
    Stage,
    TopicSpec,
    ensure_topics,
    make_consumer,
    make_producer,
    run_stage,
)


def settings_for(broker: BrokerProcess, tmp_path: Path) -> Settings:
    return Settings.from_config(Config({"bus": {"bootstrap_servers": broker.bootstrap},
                                        "map": {"path": str(tmp_path / "map.json")},
                                        "surveillance": {"instance": "test", "commit_interval_s": 0.1}}))


def test_command_log_applies_everything_up_to_the_end_then_tails(broker: BrokerProcess, tmp_path: Path) -> None:
    settings = settings_for(broker, tmp_path)
    ensure_topics(settings, {"control.t": TopicSpec(2, {"cleanup.policy": "compact"})})
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for n in range(50):
        producer.produce("control.t", b"v%d" % n, b"k%d" % (n % 7), partition=n % 2)
    producer.produce("control.t", None, b"k3", partition=0)
    assert producer.flush(10) == 0
    seen: list[tuple[bytes | None, bytes | None]] = []
    log = CommandLog(settings, "control.t", "test")
    try:
        assert log.catch_up(lambda k, v: seen.append((k, v)), timeout=30) == 51
        assert (b"k3", None) in seen and len(seen) == 51
        producer.produce("control.t", b"late", b"k9")
        producer.flush(10)
        for _ in range(100):
            if log.poll(lambda k, v: seen.append((k, v)), 0.1):
                break
        assert seen[-1] == (b"k9", b"late")
    finally:
        log.close()


def test_empty_command_topic_is_caught_up_at_once(broker: BrokerProcess, tmp_path: Path) -> None:
    settings = settings_for(broker, tmp_path)
    ensure_topics(settings, {"control.empty": TopicSpec(1, {"cleanup.policy": "compact"})})
    log = CommandLog(settings, "control.empty", "test")
    try:
        assert log.catch_up(lambda k, v: None, timeout=10) == 0
    finally:
        log.close()


def test_offsets_are_committed_only_after_the_outputs_are_acknowledged(broker: BrokerProcess, tmp_path: Path) -> None:
    """Every input record yields its outputs on the output topic, and the committed offset reaches the end."""
    settings = settings_for(broker, tmp_path)
    ensure_topics(settings, {"in": TopicSpec(2), "out": TopicSpec(1)})
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for n in range(400):
        producer.produce("in", b"%d" % n, b"%d" % n)
    assert producer.flush(10) == 0

    def handle(messages):  # even records: two outputs, odd: none
        return [[Output("out", m.value(), m.value()), Output("out", m.value(), m.value() + b"'")]
                if int(m.value()) % 2 == 0 else [] for m in messages]

    stop = threading.Event()
    stage = Stage("echo", "echo-group", ["in"], handle)
    thread = threading.Thread(target=run_stage, args=(settings, stage, make_consumer(settings, "echo-group", "echo"),
                                                      make_producer(settings, "echo"), stop))
    thread.start()
    reader = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "reader", "auto.offset.reset": "earliest"})
    reader.subscribe(["out"])
    values: list[bytes] = []
    try:
        while len(values) < 400:
            message = reader.poll(10)
            assert message is not None, f"only {len(values)} outputs"
            values.append(message.value())
    finally:
        reader.close()
        stop.set()
        thread.join(30)
    assert sorted(values) == sorted([b"%d" % n for n in range(0, 400, 2)] + [b"%d'" % n for n in range(0, 400, 2)])
    check = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "echo-group"})
    committed = check.committed([TopicPartition("in", 0), TopicPartition("in", 1)], timeout=10)
    check.close()
    assert sum(tp.offset for tp in committed) == 400
