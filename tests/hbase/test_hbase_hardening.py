"""Hostile or careless clients (issue 27, item 4): regular expressions that would backtrack for
ever, calls past the gateway's limits, too many or idle connections, scanners never closed.

Each answer is judged through happybase against a real gateway process started with small
limits; after every refusal the same connection must still work.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

import happybase
import Hbase_thrift
import psutil
import pytest
from thriftpy2.transport import TTransportException

from deploy.processes.gateway import Gateway

LONG = 30_000  # under HBase's 32,767-byte row key limit; (a+)+$ backtracks for ever on it
CATASTROPHIC = ["(a+)+$", "(a|aa)+$", "(a*)*b$", "^(([a-z])+.)+[A-Z]([a-z])+$"]


@pytest.fixture
def gw(spawn: Callable[..., Gateway]) -> Gateway:
    return spawn(
        "--max-rows-per-call", "50",
        "--max-mutate-bytes", "10000",
        "--max-scanners-per-connection", "3",
    )  # fmt: skip


def _table(conn: happybase.Connection, name: str = "t") -> happybase.Table:
    conn.create_table(name, {"cf": {}})
    return conn.table(name)


@pytest.mark.parametrize("pattern", CATASTROPHIC)
def test_catastrophic_regex_returns_promptly(spawn: Callable[..., Gateway], pattern: str) -> None:
    conn = spawn().connect(timeout=10_000)  # a hung gateway fails the test instead of hanging it
    table = _table(conn)
    table.put(b"a" * LONG + b"!", {b"cf:v": b"a" * 200_000 + b"!"})
    table.put(b"short", {b"cf:v": b"aaa"})
    for filter_string in (
        f"RowFilter(=, 'regexstring:{pattern}')",
        f"ValueFilter(=, 'regexstring:{pattern}')",
        f"SingleColumnValueFilter('cf', 'v', =, 'regexstring:{pattern}')",
    ):
        started = time.monotonic()
        rows = [key for key, _ in table.scan(filter=filter_string)]
        elapsed = time.monotonic() - started
        assert elapsed < 2, f"{filter_string} took {elapsed:.1f} s"
        assert b"a" * LONG + b"!" not in rows  # the long row never matches: it ends in '!'
    assert [k for k, _ in table.scan(filter="RowFilter(=, 'regexstring:^(a+)+!$')")] == [b"a" * LONG + b"!"]
    assert conn.tables() == [b"t"]  # and it still answers


def test_pattern_outside_linear_time_regex_is_refused_clearly(spawn: Callable[..., Gateway]) -> None:
    conn = spawn().connect(timeout=10_000)
    table = _table(conn)
    table.put(b"aa", {b"cf:v": b"x"})
    with pytest.raises(Hbase_thrift.IllegalArgument, match=r"RE2.*backreferences"):
        list(table.scan(filter="RowFilter(=, 'regexstring:(a)\\1')"))
    assert [k for k, _ in table.scan(filter="RowFilter(=, 'regexstring:^a{2}$')")] == [b"aa"]


def test_rows_per_call_limit(gw: Gateway) -> None:
    conn = gw.connect()
    table = _table(conn)
    with table.batch(batch_size=30) as batch:  # two mutateRows calls
        for i in range(60):
            batch.put(b"r%02d" % i, {b"cf:a": b"x"})
    client = conn.client

    # scannerGetList
    sid = client.scannerOpen(b"t", b"", [], {})
    with pytest.raises(Hbase_thrift.IllegalArgument, match=r"51 rows.*--max-rows-per-call"):
        client.scannerGetList(sid, 51)
    assert len(client.scannerGetList(sid, 50)) == 50  # the scanner is intact
    client.scannerClose(sid)
    # A scan's caching (happybase's batch_size) is refused at the open.
    with pytest.raises(Hbase_thrift.IOError, match=r"--max-rows-per-call"):
        list(table.scan(batch_size=51))
    assert len(list(table.scan(batch_size=50))) == 60  # in pieces of 50: fine
    # getRows
    keys = [b"r%02d" % i for i in range(60)]
    with pytest.raises(Hbase_thrift.IOError, match=r"60 rows.*--max-rows-per-call"):
        table.rows(keys)
    assert len(table.rows(keys[:50])) == 50
    # mutateRows
    with pytest.raises(Hbase_thrift.IllegalArgument, match=r"51 rows.*--max-rows-per-call"), table.batch() as batch:
        for i in range(51):
            batch.put(b"n%02d" % i, {b"cf:a": b"x"})
    assert list(table.scan(row_prefix=b"n", batch_size=50)) == []  # nothing of the refused batch was applied
    with table.batch() as batch:
        for i in range(50):
            batch.put(b"n%02d" % i, {b"cf:a": b"x"})
    assert len(list(table.scan(row_prefix=b"n", batch_size=50))) == 50


def test_mutate_bytes_limit(gw: Gateway) -> None:
    conn = gw.connect()
    table = _table(conn)
    with pytest.raises(Hbase_thrift.IllegalArgument, match=r"--max-mutate-bytes"):
        table.put(b"big", {b"cf:a": b"x" * 10_001})  # mutateRows
    with pytest.raises(Hbase_thrift.IllegalArgument, match=r"--max-mutate-bytes"):
        conn.client.mutateRow(b"t", b"big", [Hbase_thrift.Mutation(column=b"cf:a", value=b"x" * 10_001)], {})
    with pytest.raises(Hbase_thrift.IllegalArgument, match=r"--max-mutate-bytes"), table.batch() as batch:
        for i in range(20):  # many small rows add up
            batch.put(b"s%02d" % i, {b"cf:a": b"x" * 600})
    assert table.row(b"big") == {}
    assert list(table.scan(batch_size=50)) == []
    table.put(b"big", {b"cf:a": b"x" * 9_000})
    assert table.row(b"big") == {b"cf:a": b"x" * 9_000}


def test_open_scanners_per_connection_limit(gw: Gateway) -> None:
    conn = gw.connect()
    _table(conn)
    client = conn.client
    ids = [client.scannerOpen(b"t", b"", [], {}) for _ in range(3)]
    with pytest.raises(Hbase_thrift.IOError, match=r"--max-scanners-per-connection"):
        client.scannerOpen(b"t", b"", [], {})
    other = gw.connect().client  # the limit is per connection
    other_ids = [other.scannerOpen(b"t", b"", [], {}) for _ in range(3)]
    client.scannerClose(ids.pop())
    ids.append(client.scannerOpen(b"t", b"", [], {}))  # a closed scanner frees its place
    assert client.scannerGetList(ids[-1], 10) == []
    for sid in other_ids:
        other.scannerClose(sid)


def test_open_scanners_expired_free_their_places(spawn: Callable[..., Gateway]) -> None:
    gw = spawn("--max-scanners-per-connection", "2", "--scanner-lease-seconds", "1")
    conn = gw.connect()
    _table(conn)
    client = conn.client
    for _ in range(2):
        client.scannerOpen(b"t", b"", [], {})
    with pytest.raises(Hbase_thrift.IOError, match=r"--max-scanners-per-connection"):
        client.scannerOpen(b"t", b"", [], {})
    time.sleep(2.2)  # both leases run out
    client.scannerOpen(b"t", b"", [], {})


def _raw_connection_closed(port: int, wait: float = 2.0) -> bool:
    """Whether the gateway closes a fresh TCP connection on its own within ``wait`` seconds."""
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as sock:
        try:
            return sock.recv(1) == b""
        except TimeoutError:
            return False
        except ConnectionResetError:
            return True


def test_connection_cap(spawn: Callable[..., Gateway]) -> None:
    gw = spawn("--max-connections", "3")
    held = [gw.connect() for _ in range(3)]
    for conn in held:
        assert conn.tables() == []
    started = time.monotonic()
    extra = gw.connect(timeout=5_000)
    with pytest.raises((TTransportException, OSError)):
        extra.tables()
    assert time.monotonic() - started < 2  # closed at once, not left waiting
    assert _raw_connection_closed(gw.port)
    held[0].create_table("t", {"cf": {}})  # the others keep working
    for conn in held:
        assert conn.tables() == [b"t"]
    held.pop().close()
    deadline = time.monotonic() + 5
    while True:  # the gateway notices the close and takes a new connection
        fresh = gw.connect(timeout=5_000)
        try:
            assert fresh.tables() == [b"t"]
            break
        except (TTransportException, OSError):
            assert time.monotonic() < deadline
            time.sleep(0.1)
    assert "too many connections" in gw.log()


def test_idle_connections_are_dropped(spawn: Callable[..., Gateway]) -> None:
    gw = spawn("--idle-timeout-seconds", "1")
    idle = gw.connect()
    busy = gw.connect()
    assert idle.tables() == []
    for _ in range(8):  # a client that keeps talking is never idle
        time.sleep(0.25)
        assert busy.tables() == []
    with pytest.raises((TTransportException, OSError)):
        idle.tables()  # was silent for 2 s: closed by the gateway
    assert busy.tables() == []
    started = time.monotonic()
    assert _raw_connection_closed(gw.port, wait=4.0)  # a silent raw socket too, after ~1 s
    assert 0.8 < time.monotonic() - started < 3.5
    assert gw.connect().tables() == []  # new connections are served as before
    assert "closing idle connection" in gw.log()


def test_request_far_over_the_mutate_limit_is_not_read_whole(spawn: Callable[..., Gateway]) -> None:
    """Past twice --max-mutate-bytes (+1 MiB) a request is not buffered to its end: only its
    connection is closed. Under that the call is read and answered with the limit's name."""
    gw = spawn("--max-mutate-bytes", "1000000")
    conn = gw.connect(timeout=10_000)
    table = _table(conn)
    with pytest.raises(Hbase_thrift.IllegalArgument, match=r"--max-mutate-bytes"):
        table.put(b"r", {b"cf:a": b"x" * 2_500_000})  # over the limit, under the hard cap
    assert conn.tables() == [b"t"]
    huge = gw.connect(timeout=10_000)
    with pytest.raises((TTransportException, OSError)):
        huge.table("t").put(b"r", {b"cf:a": b"x" * 50_000_000})
    assert "request too large" in gw.log()
    assert gw.alive()
    assert conn.tables() == [b"t"]  # the other connection never noticed
    assert table.row(b"r") == {}


def test_listens_on_loopback_only_by_default(spawn: Callable[..., Gateway]) -> None:
    gw = spawn()  # no --host
    listening = [
        c.laddr for c in psutil.Process(gw.proc.pid).net_connections(kind="inet") if c.status == psutil.CONN_LISTEN
    ]
    assert [(a.ip, a.port) for a in listening] == [("127.0.0.1", gw.port)]
    try:  # and so from another address of this machine nothing answers
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("192.0.2.1", 9))  # no packet is sent: this only picks the outgoing address
            address = probe.getsockname()[0]
    except OSError:
        return
    if not address.startswith("127."):
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((address, gw.port), timeout=2).close()


def test_deeply_nested_filter_is_refused_clearly(gw: Gateway) -> None:
    conn = gw.connect(timeout=10_000)
    table = _table(conn)
    table.put(b"r", {b"cf:a": b"x"})
    for nested in ("(" * 20_000 + "KeyOnlyFilter()" + ")" * 20_000, "SKIP " * 20_000 + "KeyOnlyFilter()"):
        with pytest.raises(Hbase_thrift.IllegalArgument, match="nested too deeply"):
            list(table.scan(filter=nested, batch_size=50))
    assert [k for k, _ in table.scan(filter="KeyOnlyFilter()", batch_size=50)] == [b"r"]
