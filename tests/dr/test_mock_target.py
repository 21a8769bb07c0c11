"""librdkafka's mock cluster as the DR target: nothing in the mirror depends on our broker.

The mock serves no CreateTopics or DescribeConfigs, so the mirror falls back to auto-creation there
(its default partition count, 4 here, is at least the source's 2) and skips config sync.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import Producer

from contracts.processes import spawn
from deploy.processes.mirror import MirrorProcess
from testkit.mirror import create_topics, end_offsets, write_properties
from tests.dr._support import read_all, wait_until


@pytest.mark.slow
def test_mirror_into_librdkafka_mock_cluster(make_broker, tmp_path: Path) -> None:
    source = make_broker(name="source")
    create_topics(source.bootstrap, {"capture.vehicle": 2})
    producer = Producer({"bootstrap.servers": source.bootstrap, "compression.type": "zstd", "linger.ms": 5,
                         "transactional.id": "dr-mock"})
    producer.init_transactions(30)
    for n, commit in ((200, True), (50, False), (300, True)):
        producer.begin_transaction()
        for i in range(n):
            producer.produce("capture.vehicle", key=str(i).encode(), value=f"{commit}-{i}".encode())
        producer.commit_transaction(30) if commit else producer.abort_transaction(30)
    mock = spawn([sys.executable, "-m", "tests.dr._mock_cluster"], subprocess.PIPE, stdin=subprocess.PIPE,
                 stderr=subprocess.DEVNULL)
    try:
        assert mock.stdout is not None
        target = mock.stdout.readline().decode().strip()
        assert target, "the mock cluster did not start"
        props = write_properties(tmp_path / "mm2.properties", source.bootstrap, target)
        mirror = MirrorProcess(["--config", str(props)], tmp_path / "mirror.log").start()
        try:
            expected = [len(read_all(source.bootstrap, "capture.vehicle", p)) for p in range(2)]
            assert sum(expected) == 500
            wait_until(lambda: end_offsets(target, "capture.vehicle", 2) == expected, 60, "mirrored to the mock",
                       mirror.logs)
        finally:
            assert mirror.stop() == 0, mirror.logs()[-3000:]
        for p in range(2):
            assert [(k, v) for _, k, v in read_all(target, "capture.vehicle", p)] == \
                   [(k, v) for _, k, v in read_all(source.bootstrap, "capture.vehicle", p)]
    finally:
        if mock.stdin:
            mock.stdin.close()
        mock.wait(10)
