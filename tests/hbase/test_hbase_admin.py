"""Table administration through happybase, and HBase's errors for it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import happybase
import pytest
from Hbase_thrift import AlreadyExists, IllegalArgument, IOError

from deploy.processes.gateway import Gateway

from .conftest import unique_name


def test_create_describe_list_delete(conn: happybase.Connection) -> None:
    name = unique_name()
    conn.create_table(name, {"cf": {"max_versions": 7, "time_to_live": 3600, "compression": "gz"}, "meta": {}})
    assert name.encode() in conn.tables()
    families = conn.table(name).families()
    assert families[b"cf"]["max_versions"] == 7
    assert families[b"cf"]["time_to_live"] == 3600
    assert families[b"cf"]["compression"] == b"GZ"
    assert families[b"meta"]["max_versions"] == 3
    assert families[b"meta"]["time_to_live"] == 2**31 - 1  # HBase's FOREVER
    regions = conn.table(name).regions()
    assert len(regions) == 1 and regions[0]["start_key"] == b"" and regions[0]["end_key"] == b""
    conn.delete_table(name, disable=True)
    assert name.encode() not in conn.tables()


def test_enable_disable(conn: happybase.Connection) -> None:
    name = unique_name()
    conn.create_table(name, {"cf": {}})
    table = conn.table(name)
    table.put(b"r", {b"cf:a": b"1"})
    assert conn.is_table_enabled(name)
    conn.disable_table(name)
    assert not conn.is_table_enabled(name)
    for action in (
        lambda: table.row(b"r"),
        lambda: table.put(b"r", {b"cf:a": b"2"}),
        lambda: list(table.scan()),
        lambda: table.counter_inc(b"r", b"cf:n"),
        lambda: table.delete(b"r", columns=[b"cf:a"]),
    ):
        with pytest.raises(IOError, match="TableNotEnabledException"):
            action()
    assert table.families()  # schema reads still work on a disabled table
    with pytest.raises(IOError, match="TableNotEnabledException"):
        conn.disable_table(name)
    conn.enable_table(name)
    assert table.row(b"r") == {b"cf:a": b"1"}
    with pytest.raises(IOError, match="TableNotDisabledException"):
        conn.delete_table(name)  # HBase only deletes disabled tables
    conn.delete_table(name, disable=True)


def test_errors(conn: happybase.Connection) -> None:
    name = unique_name()
    conn.create_table(name, {"cf": {}})
    with pytest.raises(AlreadyExists):
        conn.create_table(name, {"cf": {}})
    with pytest.raises(IOError, match="TableNotFoundException"):
        conn.table("no_such_table").row(b"r")
    with pytest.raises(IOError, match="TableNotFoundException"):
        conn.delete_table("no_such_table")
    with pytest.raises(IOError, match="TableNotFoundException"):
        conn.is_table_enabled("no_such_table")
    with pytest.raises(IllegalArgument, match="Illegal table name"):
        conn.create_table("bad name!", {"cf": {}})
    with pytest.raises(IllegalArgument):
        conn.create_table(unique_name(), {"cf": {"max_versions": 0}})
    with pytest.raises(IllegalArgument):
        conn.create_table(unique_name(), {"cf": {"compression": "nope"}})
    with pytest.raises(IllegalArgument):
        conn.client.createTable(unique_name().encode(), [])  # happybase itself refuses an empty dict
    with pytest.raises(IOError, match="NoSuchColumnFamilyException"):
        conn.table(name).put(b"r", {b"nope:a": b"1"})
    with pytest.raises(IOError, match="NoSuchColumnFamilyException"):
        conn.table(name).row(b"r", columns=[b"nope"])
    conn.delete_table(name, disable=True)


def test_schema_and_state_survive_restart(spawn: Callable[..., Gateway], tmp_path: Path) -> None:
    gw = spawn()
    conn = gw.connect()
    conn.create_table("kept", {"cf": {"max_versions": 5, "time_to_live": 99}})
    conn.create_table("off", {"cf": {}})
    conn.disable_table("off")
    assert gw.terminate() == 0
    gw2 = spawn(data_dir=gw.data_dir)
    conn2 = gw2.connect()
    assert sorted(conn2.tables()) == [b"kept", b"off"]
    fam = conn2.table("kept").families()[b"cf"]
    assert (fam["max_versions"], fam["time_to_live"]) == (5, 99)
    assert not conn2.is_table_enabled("off")


def test_table_name_reuse_after_delete(conn: happybase.Connection) -> None:
    name = unique_name()
    conn.create_table(name, {"cf": {}})
    conn.table(name).put(b"r", {b"cf:a": b"old"})
    conn.delete_table(name, disable=True)
    conn.create_table(name, {"cf": {}})
    assert conn.table(name).row(b"r") == {}  # nothing of the dropped table comes back
    conn.delete_table(name, disable=True)
