"""The gateway as a process: durability across kill -9, concurrency, hostile input, lifecycle."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import happybase
import pytest
from thriftpy2.protocol import TBinaryProtocol
from thriftpy2.thrift import TApplicationException, TMessageType
from thriftpy2.transport import TBufferedTransport, TSocket

from contracts.processes import ROOT
from deploy.processes.gateway import Gateway

from .conftest import unique_name


def test_acknowledged_batches_survive_kill_9(spawn: Callable[..., Gateway]) -> None:
    gw = spawn()
    conn = gw.connect()
    conn.create_table("durable", {"cf": {"max_versions": 2}})
    table = conn.table("durable")
    for b in range(10):
        with table.batch() as batch:  # each batch is acknowledged when the with block ends
            for i in range(500):
                batch.put(b"row-%02d-%04d" % (b, i), {b"cf:a": b"%d" % i, b"cf:b": b"x" * 20})
    table.delete(b"row-00-0000")
    table.counter_inc(b"counter", b"cf:n", 41)
    gw.proc.send_signal(signal.SIGKILL)
    gw.proc.wait(10)

    gw2 = spawn(data_dir=gw.data_dir)
    table2 = gw2.connect().table("durable")
    rows = dict(table2.scan(batch_size=2000))
    assert len(rows) == 10 * 500 - 1 + 1
    assert b"row-00-0000" not in rows
    assert rows[b"row-09-0499"] == {b"cf:a": b"499", b"cf:b": b"x" * 20}
    assert table2.counter_inc(b"counter", b"cf:n") == 42
    assert table2.families()[b"cf"]["max_versions"] == 2


def test_kill_9_mid_stream_keeps_every_acknowledged_batch(spawn: Callable[..., Gateway]) -> None:
    """A writer streams batches (enough to trigger background WAL checkpoints) while the
    gateway is killed: every batch acknowledged before the kill is whole after restart, and
    no batch is half there (one transaction per mutateRows)."""
    gw = spawn()
    gw.connect().create_table("stream", {"cf": {}})
    table = gw.connect().table("stream")
    acknowledged: list[int] = []

    def writer() -> None:
        try:
            for b in range(10_000):
                with table.batch() as batch:
                    for i in range(1000):
                        batch.put(b"%04x-%03d" % (i * 7919 % 65536, b), {b"cf:a": b"%d" % b, b"cf:b": b"y" * 20})
                acknowledged.append(b)
        except Exception:  # the gateway died under us: expected
            return

    thread = threading.Thread(target=writer)
    thread.start()
    deadline = time.monotonic() + 20
    while len(acknowledged) < 60 and time.monotonic() < deadline:
        time.sleep(0.05)
    gw.proc.send_signal(signal.SIGKILL)
    gw.proc.wait(10)
    thread.join(10)
    assert len(acknowledged) >= 60

    per_batch: dict[bytes, int] = {}
    for _key, data in spawn(data_dir=gw.data_dir).connect().table("stream").scan(batch_size=5000):
        per_batch[data[b"cf:a"]] = per_batch.get(data[b"cf:a"], 0) + 1
    assert all(per_batch.get(b"%d" % b) == 1000 for b in acknowledged)
    assert all(count == 1000 for count in per_batch.values())


def test_concurrent_connections(gateway: Gateway) -> None:
    name = unique_name()
    admin = gateway.connect()
    admin.create_table(name, {"cf": {}})
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            table = gateway.connect().table(name)
            for i in range(30):
                table.put(b"w%d-%03d" % (n, i), {b"cf:a": b"%d" % i})
                table.counter_inc(b"shared", b"cf:hits")
            assert len(list(table.scan(row_prefix=b"w%d-" % n))) == 30
        except BaseException as exc:  # reported to the main thread
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    table = admin.table(name)
    assert sum(1 for _ in table.scan(row_prefix=b"w")) == 8 * 30
    assert table.counter_get(b"shared", b"cf:hits") == 8 * 30  # increments are atomic
    admin.delete_table(name, disable=True)


def test_connection_pool(gateway: Gateway) -> None:
    pool = happybase.ConnectionPool(size=3, host="127.0.0.1", port=gateway.port)
    name = unique_name()
    with pool.connection() as conn:
        conn.create_table(name, {"cf": {}})

    def use(i: int) -> None:
        with pool.connection() as conn:
            conn.table(name).put(b"p%02d" % i, {b"cf:a": b"1"})

    threads = [threading.Thread(target=use, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    with pool.connection() as conn:
        assert len(list(conn.table(name).scan())) == 12
        conn.delete_table(name, disable=True)


def test_garbage_bytes_do_not_hurt_the_server(gateway: Gateway) -> None:
    name = unique_name()
    bystander = gateway.connect()
    bystander.create_table(name, {"cf": {}})
    table = bystander.table(name)
    table.put(b"r", {b"cf:a": b"1"})
    payloads = [
        os.urandom(4096),
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        b"\x80\x01\x00\x01\x7f\xff\xff\xff",  # valid header, absurd method-name length, then hang up
        b"\x80\x01\x00\x01\x00\x00\x00\x06getRow\x00\x00\x00\x01\x0b\x00\x01\xff\xff\xff\xf0",  # negative length
        b"\x00\x00\x00\x05hello",
    ]
    for payload in payloads:
        with socket.create_connection(("127.0.0.1", gateway.port), timeout=5) as sock:
            sock.sendall(payload)
            sock.shutdown(socket.SHUT_WR)
            sock.settimeout(5)
            try:
                while sock.recv(4096):
                    pass
            except OSError:
                pass
        assert table.row(b"r") == {b"cf:a": b"1"}  # the established client is unaffected
    assert gateway.alive()
    assert gateway.connect().table(name).row(b"r") == {b"cf:a": b"1"}
    bystander.delete_table(name, disable=True)


def test_unknown_method_is_answered_and_connection_kept(gateway: Gateway) -> None:
    sock = TSocket("127.0.0.1", gateway.port)
    trans = TBufferedTransport(sock)
    proto = TBinaryProtocol(trans)
    trans.open()
    try:
        proto.write_message_begin("noSuchMethod", TMessageType.CALL, 7)
        proto.write_struct(TApplicationException())  # any empty struct will do as arguments
        proto.write_message_end()
        trans.flush()
        _name, mtype, seqid = proto.read_message_begin()
        answer = TApplicationException()
        proto.read_struct(answer)
        assert (mtype, seqid, answer.type) == (TMessageType.EXCEPTION, 7, TApplicationException.UNKNOWN_METHOD)
        proto.write_message_begin("getTableNames", TMessageType.CALL, 8)
        proto.write_struct(TApplicationException())
        proto.write_message_end()
        trans.flush()
        assert proto.read_message_begin()[1:] == (TMessageType.REPLY, 8)
    finally:
        trans.close()


def test_idle_client_is_not_dropped(gateway: Gateway) -> None:
    conn = gateway.connect()
    conn.tables()
    time.sleep(3.5)  # longer than thriftpy2's default 3 s client timeout
    assert isinstance(conn.tables(), list)


@pytest.mark.parametrize(
    ("transport", "protocol"), [("framed", "binary"), ("buffered", "compact"), ("framed", "compact")]
)
def test_other_transports_and_protocols(spawn: Callable[..., Gateway], transport: str, protocol: str) -> None:
    gw = spawn("--transport", transport, "--protocol", protocol)
    conn = gw.connect()
    conn.create_table("t", {"cf": {}})
    table = conn.table("t")
    with table.batch() as batch:
        for i in range(300):
            batch.put(b"r%03d" % i, {b"cf:a": b"%d" % i})
    assert len(list(table.scan(batch_size=50))) == 300
    assert table.row(b"r123") == {b"cf:a": b"123"}


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_clean_exit_on_signal(spawn: Callable[..., Gateway], sig: int) -> None:
    gw = spawn()
    idle = gw.connect()  # an open connection must not hold up shutdown
    idle.tables()
    started = time.monotonic()
    assert gw.terminate(sig) == 0
    assert time.monotonic() - started < 5
    assert '"message": "stopped"' in gw.log()


def run_cli(*args: str, timeout: float = 20) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "deploy.hbase_gateway", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.parametrize(
    "args",
    [
        (),  # --data-dir is required
        ("--data-dir", "D", "--port", "70000"),
        ("--data-dir", "D", "--port", "http"),
        ("--data-dir", "D", "--transport", "zmq"),
        ("--data-dir", "D", "--protocol", "json"),
        ("--data-dir", "D", "--scanner-lease-seconds", "0"),
        ("--data-dir", "D", "--bogus"),
    ],
)
def test_bad_arguments(tmp_path: Path, args: tuple[str, ...]) -> None:
    result = run_cli(*(str(tmp_path / "d") if a == "D" else a for a in args))
    assert result.returncode == 2
    assert "error" in result.stderr
    assert result.stdout == ""


def test_data_dir_that_is_a_file(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    result = run_cli("--data-dir", str(not_a_dir))
    assert result.returncode == 2 and "not a directory" in result.stderr


def test_port_in_use(gateway: Gateway, tmp_path: Path) -> None:
    result = run_cli("--data-dir", str(tmp_path / "d"), "--port", str(gateway.port))
    assert result.returncode == 1
    assert "cannot listen" in result.stderr
