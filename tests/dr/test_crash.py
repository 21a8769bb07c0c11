"""kill -9 of the mirror mid-stream: nothing lost, nothing twice, offsets kept, partition by partition."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from deploy.processes.mirror import MirrorProcess
from testkit.mirror import create_topics, end_offsets, write_properties
from tests.dr._support import read_all, wait_until


class Load(threading.Thread):
    """Plain records into capture.vehicle and transactions (every fifth aborted) into capture.face."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap = bootstrap
        self.stopping = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            plain = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 2, "compression.type": "lz4"})
            txn = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": "dr-crash", "linger.ms": 2})
            txn.init_transactions(30)
            n = 0
            while not self.stopping.is_set():
                txn.begin_transaction()
                for _ in range(20):
                    plain.produce("capture.vehicle", key=str(n).encode(), value=f"vehicle-{n}".encode())
                    txn.produce("capture.face", key=str(n).encode(), value=f"face-{n}".encode(), partition=n % 2)
                    n += 1
                if (n // 20) % 5 == 0:
                    txn.abort_transaction(30)
                else:
                    txn.commit_transaction(30)
                plain.poll(0)
                time.sleep(0.01)
            assert plain.flush(30) == 0
        except BaseException as exc:
            self.error = exc


@pytest.mark.slow
def test_kill_9_mid_stream_loses_and_duplicates_nothing(make_broker, tmp_path: Path) -> None:
    source, target = make_broker(name="source"), make_broker(name="target")
    create_topics(source.bootstrap, {"capture.vehicle": 2, "capture.face": 2})
    props = write_properties(tmp_path / "mm2.properties", source.bootstrap, target.bootstrap, tasks_max="2")
    load = Load(source.bootstrap)
    load.start()
    mirror = MirrorProcess(["--config", str(props)], tmp_path / "mirror.log").start()
    at_kill: list[int] = []
    try:
        for _ in range(3):
            before = sum(end_offsets(target.bootstrap, "capture.vehicle", 2)) if at_kill else 0
            wait_until(lambda b=before: sum(end_offsets(target.bootstrap, "capture.vehicle", 2)) > b + 200, 60,
                       "the mirror under way", mirror.logs)
            mirror.kill()
            at_kill.append(sum(end_offsets(target.bootstrap, "capture.vehicle", 2)))
            mirror = MirrorProcess(["--config", str(props)], tmp_path / "mirror.log").start()
        time.sleep(2)
        load.stopping.set()
        load.join(60)
        assert load.error is None, load.error
        expected = end_offsets(source.bootstrap, "capture.vehicle", 2)
        wait_until(lambda: end_offsets(target.bootstrap, "capture.vehicle", 2) == expected, 90, "catch-up",
                   mirror.logs)
        committed = [len(read_all(source.bootstrap, "capture.face", p)) for p in range(2)]
        wait_until(lambda: end_offsets(target.bootstrap, "capture.face", 2) == committed, 90, "face catch-up",
                   mirror.logs)
    finally:
        load.stopping.set()
        assert mirror.stop() == 0, mirror.logs()[-3000:]
    assert sum(expected) > at_kill[-1]  # killed mid-stream, with more to mirror after each restart
    for p in range(2):
        assert read_all(target.bootstrap, "capture.vehicle", p) == read_all(source.bootstrap, "capture.vehicle", p)
        src = read_all(source.bootstrap, "capture.face", p)
        dst = read_all(target.bootstrap, "capture.face", p)
        assert [v for _, _, v in dst] == [v for _, _, v in src]
        assert [o for o, _, _ in dst] == list(range(len(src)))
        assert len(src) > 100
