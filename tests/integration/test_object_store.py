"""The embedded object store as a real `weed mini` process, judged by the minio SDK through video.storage."""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from minio import Minio
from minio.error import S3Error

from contracts.processes import spawn, terminate
from deploy import object_store, shutdown
from deploy.object_store import ObjectStore, free_port_pair
from video import storage

T0 = dt.datetime(2024, 5, 1, 8, 0, tzinfo=dt.UTC)
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ObjectStore]:
    with ObjectStore(tmp_path_factory.mktemp("s3"), port=0) as running:
        yield running


def _client(store: ObjectStore) -> Minio:
    return storage.connect(store.url, store.access_key, store.secret_key)


def test_default_buckets_exist_and_every_port_is_loopback(store: ObjectStore) -> None:
    client = _client(store)
    assert {b.name for b in client.list_buckets()} >= {"videos", "synopsis"}
    listening = Path("/proc/net/tcp").read_text().splitlines()[1:]
    assert store.proc is not None
    inodes = {os.readlink(f"/proc/{store.proc.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{store.proc.pid}/fd")}
    ours = [line.split() for line in listening if f"socket:[{line.split()[9]}]" in inodes]
    addresses = {fields[1].split(":")[0] for fields in ours if fields[3] == "0A"}  # 0A: LISTEN
    assert addresses == {"0100007F"}, "every listener must be on 127.0.0.1"


def test_wrong_secret_is_rejected(store: ObjectStore) -> None:
    wrong = storage.connect(store.url, store.access_key, "not-the-secret")
    with pytest.raises(S3Error):
        wrong.list_buckets()


def test_upload_list_by_camera_and_time_presigned(store: ObjectStore, tmp_path: Path) -> None:
    client = _client(store)
    small = tmp_path / "a.mp4"
    small.write_bytes(b"x" * 1000)
    stored = [storage.upload_video(client, small, "cam-7", T0 + dt.timedelta(hours=h)) for h in (0, 1, 2)]
    storage.upload_video(client, small, "cam-8", T0)
    found = list(storage.list_videos(client, "cam-7", since=T0 + dt.timedelta(minutes=30)))
    assert [v.key for v in found] == [stored[1].key, stored[2].key]
    assert found[0].start_time == T0 + dt.timedelta(hours=1)
    url = storage.presigned_url(client, stored[0].url, dt.timedelta(minutes=5))
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.read() == b"x" * 1000


def test_multipart_upload_round_trip(store: ObjectStore, tmp_path: Path) -> None:
    client = _client(store)
    big = tmp_path / "big.mp4"
    payload = os.urandom(11 * 1024 * 1024 + 123)
    big.write_bytes(payload)
    stored = storage.upload_video(client, big, "cam-9", T0, part_size=5 * 1024 * 1024)
    stat = client.stat_object(stored.bucket, stored.key)
    assert "-" in (stat.etag or ""), "a multipart upload has an etag of the form md5-parts"
    back = storage.download(client, stored.url, tmp_path / "back.mp4")
    assert back.read_bytes() == payload


def test_data_survives_restart(tmp_path: Path) -> None:
    data = tmp_path / "s3"
    with ObjectStore(data, port=0) as first:
        storage.put_bytes(_client(first), "videos", "cam/x.bin", b"kept", "application/octet-stream")
        port = first.port
    with ObjectStore(data, port=port) as second:
        assert _client(second).get_object("videos", "cam/x.bin").read() == b"kept"


@pytest.mark.parametrize("command", [["deploy.object_store", "--port", "60767"], ["deploy.up", "--no-pipeline"]])
def test_a_port_whose_grpc_pair_overflows_is_refused_with_the_reason(command: list[str], tmp_path: Path) -> None:
    """The S3 gRPC port is the S3 port + 10000: asked for 60767, `weed` was started with -s3.port.grpc=70767 and
    failed in its own log. Both entry points refuse it before starting anything, naming the limit."""
    config = tmp_path / "solution.toml"
    config.write_text('[object_storage]\nendpoint = "127.0.0.1:60767"\n')
    result = subprocess.run([sys.executable, "-m", *command, "--config", str(config), "--data-dir", str(tmp_path)],
                            cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "60767" in result.stderr and "55535" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "store").exists() and not (tmp_path / "up.pid").exists()


def _start_wrapper(tmp_path: Path) -> tuple[subprocess.Popen[bytes], int]:
    """`python -m deploy.object_store` as `make up` starts it; returns it and its `weed`'s pid once S3 answers."""
    wrapper = spawn([sys.executable, "-m", "deploy.object_store", "--data-dir", str(tmp_path),
                     "--port", str(free_port_pair()), "--metrics-port", "0"],  # not the config's 9327
                    subprocess.PIPE)
    assert wrapper.stdout is not None
    line = wrapper.stdout.readline().decode()
    assert "ready" in line, line
    weed = [child for child in psutil.Process(wrapper.pid).children() if child.name() == "weed"]
    assert len(weed) == 1, weed
    return wrapper, weed[0].pid


def _gone(pid: int, within: float) -> bool:
    with contextlib.suppress(psutil.NoSuchProcess):
        psutil.Process(pid).wait(within)
    return not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_a_hung_weed_is_killed_within_make_ups_grace_for_the_wrapper(tmp_path: Path) -> None:
    """CI: `make down` left `weed mini` running. The wrapper gave `weed` 20 s after SIGTERM, exactly the grace `make
    up` gives the wrapper, so the wrapper was SIGKILLed first and `weed`, in a session of its own, lived on. A
    stopped `weed` cannot answer SIGTERM at all: the wrapper must still kill it and exit within the grace."""
    wrapper, weed = _start_wrapper(tmp_path)
    try:
        os.kill(weed, signal.SIGSTOP)
        started = time.monotonic()
        terminate(wrapper, shutdown.SERVICE_GRACE_S)  # what make up's stop does to each service
        took = time.monotonic() - started
        assert wrapper.returncode == 0, wrapper.returncode  # the wrapper's own clean exit, not make up's SIGKILL
        assert took < shutdown.SERVICE_GRACE_S
        assert _gone(weed, 5)
    finally:
        wrapper.kill()
        with contextlib.suppress(ProcessLookupError):
            os.kill(weed, signal.SIGKILL)


def test_weed_dies_with_a_killed_wrapper(tmp_path: Path) -> None:
    """A wrapper killed by SIGKILL (or the OOM killer) cannot stop `weed`; the kernel tells `weed` instead."""
    wrapper, weed = _start_wrapper(tmp_path)
    try:
        wrapper.kill()
        wrapper.wait(10)
        assert _gone(weed, object_store.WEED_GRACE_S + 5)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(weed, signal.SIGKILL)
