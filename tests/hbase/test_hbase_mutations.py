"""Write timestamps and partial failures of mutation calls, judged against HBase's Thrift1 server.

HBase gives an increment ``max(now, old timestamp + 1)`` (HRegion.reckonDelta). A put stamped
with the plain wall clock right after a burst of increments then sorts below them and is never
visible; the gateway's single write clock keeps such a put on top, across restarts too.

A multi-row mutation (mutateRows) is two HBase batches on the Thrift server: ``Table.put(puts)``
then, if every put succeeded, ``Table.delete(deletes)``; inside a batch a row with an unknown
family fails alone and the client raises RetriesExhaustedWithDetailsException (Thrift IOError).
mutateRow is ``Table.delete(delete)`` then ``Table.put(put)``.
"""

from __future__ import annotations

import time
from pathlib import Path

import happybase
import pytest
from Hbase_thrift import BatchMutation, IOError, Mutation, TIncrement

from deploy.hbase_gateway import store as store_module
from deploy.hbase_gateway.cells import FamilyOptions
from deploy.hbase_gateway.store import Store


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def burst_of_increments(table: happybase.Table, row: bytes, column: bytes, n: int) -> None:
    """``n`` increments of one cell in a single call: far more than one per millisecond, so
    each takes ``old timestamp + 1`` and the cell's timestamp runs ahead of the wall clock."""
    client = table.connection.client
    client.incrementRows([TIncrement(table.name, row, column, 1) for _ in range(n)])


def test_put_right_after_increments_is_visible(table: happybase.Table) -> None:
    burst_of_increments(table, b"c", b"cf:n", 2000)
    ((_value, ts),) = table.cells(b"c", b"cf:n", versions=1, include_timestamp=True)
    assert ts > now_ms(), "the burst did not run ahead of the wall clock: this test would prove nothing"
    assert table.counter_get(b"c", b"cf:n") == 2000
    table.counter_set(b"c", b"cf:n", 7)  # a put with the server's timestamp
    assert table.counter_get(b"c", b"cf:n") == 7
    assert table.counter_inc(b"c", b"cf:n") == 8
    table.put(b"c", {b"cf:n": b"plain"})
    assert table.row(b"c") == {b"cf:n": b"plain"}
    # The versions stay ordered by write: the put is the newest, the increments behind it.
    cells = table.cells(b"c", b"cf:n", versions=3, include_timestamp=True)
    assert cells[0][0] == b"plain"
    assert [ts for _v, ts in cells] == sorted((ts for _v, ts in cells), reverse=True)


def test_clock_lead_survives_a_restart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The clock's lead over the wall clock is stored with the writes that make it, so a
    restarted store (here with the wall clock frozen, to make the lead certain) stays ahead."""
    frozen = 1_700_000_000_000
    monkeypatch.setattr(store_module, "now_ms", lambda: frozen)
    store = Store(tmp_path)
    store.create_table(b"t", {b"cf": FamilyOptions()})
    for _ in range(5):
        store.read_modify_write(b"t", b"r", [b"cf:n"], lambda _c, old: b"%d" % (int(old[2]) + 1 if old else 1))
    store.close()
    store = Store(tmp_path)  # the wall clock has not moved: only the stored lead helps
    store.mutate(b"t", [(b"r", [(False, b"cf:n", b"put")])])
    assert store.get_rows(b"t", [b"r"]) == [(b"r", [(b"cf:n", frozen + 4, b"put")])]
    store.close()


def test_increment_of_a_future_cell_leaves_the_clock_alone(table: happybase.Table) -> None:
    """A client-stamped future cell gets ``old + 1`` (as in HBase) without dragging the
    server's clock, so later puts to other cells keep wall-clock timestamps."""
    future = 2**50
    table.put(b"f", {b"cf:n": (0).to_bytes(8, "big")}, timestamp=future)
    assert table.counter_inc(b"f", b"cf:n") == 1
    assert table.cells(b"f", b"cf:n", include_timestamp=True)[0][1] == future + 1
    table.put(b"g", {b"cf:a": b"x"})
    ((_value, ts),) = table.cells(b"g", b"cf:a", versions=1, include_timestamp=True)
    assert ts < future


def mutation(column: bytes, value: bytes | None = None, delete: bool = False) -> Mutation:
    return Mutation(isDelete=delete, column=column, value=value)


def test_mutate_rows_with_a_bad_put_row(table: happybase.Table) -> None:
    client, name = table.connection.client, table.name
    table.put(b"r1", {b"cf:old": b"keep"})
    batches = [
        BatchMutation(b"r1", [mutation(b"cf:a", b"1"), mutation(b"cf:old", delete=True)]),
        BatchMutation(b"r2", [mutation(b"cf:a", b"2"), mutation(b"nope:a", b"x")]),
        BatchMutation(b"r3", [mutation(b"cg:a", b"3")]),
    ]
    with pytest.raises(IOError) as err:
        client.mutateRows(name, batches, {})
    message = err.value.message.decode()
    assert message.startswith("org.apache.hadoop.hbase.client.RetriesExhaustedWithDetailsException: Failed 1 action:")
    assert "NoSuchColumnFamilyException" in message and "nope" in message
    # The other rows' puts are applied, the bad row's whole put is not, and no delete ran.
    assert table.row(b"r1") == {b"cf:a": b"1", b"cf:old": b"keep"}
    assert table.row(b"r2") == {}
    assert table.row(b"r3") == {b"cg:a": b"3"}


def test_mutate_rows_with_a_bad_delete_row(table: happybase.Table) -> None:
    client, name = table.connection.client, table.name
    table.put(b"r1", {b"cf:a": b"1", b"cf:b": b"2"})
    table.put(b"r2", {b"cf:a": b"1"})
    batches = [
        BatchMutation(b"r1", [mutation(b"cf:c", b"3"), mutation(b"cf:a", delete=True)]),
        BatchMutation(b"r2", [mutation(b"cf:c", b"3"), mutation(b"nope", delete=True)]),
        BatchMutation(b"r3", [mutation(b"cf:z", delete=True), mutation(b"nope2:q", delete=True)]),
    ]
    with pytest.raises(IOError, match=r"Failed 2 actions: .*NoSuchColumnFamilyException"):
        client.mutateRows(name, batches, {})
    assert table.row(b"r1") == {b"cf:b": b"2", b"cf:c": b"3"}  # its put and its delete
    assert table.row(b"r2") == {b"cf:a": b"1", b"cf:c": b"3"}  # its put only


def test_mutate_row_applies_its_delete_before_a_failing_put(table: happybase.Table) -> None:
    client, name = table.connection.client, table.name
    table.put(b"r", {b"cf:a": b"1", b"cf:b": b"2"})
    muts = [mutation(b"cf:a", delete=True), mutation(b"cf:c", b"3"), mutation(b"nope:x", b"y")]
    with pytest.raises(IOError, match="NoSuchColumnFamilyException"):
        client.mutateRow(name, b"r", muts, {})
    assert table.row(b"r") == {b"cf:b": b"2"}


def test_mutate_row_with_a_bad_delete_applies_nothing(table: happybase.Table) -> None:
    client, name = table.connection.client, table.name
    table.put(b"r", {b"cf:a": b"1"})
    muts = [mutation(b"cf:a", delete=True), mutation(b"nope", delete=True), mutation(b"cf:c", b"3")]
    with pytest.raises(IOError, match="NoSuchColumnFamilyException"):
        client.mutateRow(name, b"r", muts, {})
    assert table.row(b"r") == {b"cf:a": b"1"}
