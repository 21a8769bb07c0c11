"""Retention through a real HBase gateway: the tables the ingest job and the hit loader create carry the
``[retention]`` TTL, and a capture older than it is gone from every read at once (a short TTL, as in a test
config), while a table that already exists keeps what it had."""

from __future__ import annotations

import time
from pathlib import Path

import happybase

from contracts.records import Kind
from contracts.tables import captures, surveillance
from deploy.processes.gateway import start_gateway
from spark_jobs.capture_writer import close_cached_clients, write_puts
from testkit.web_data import puts_for, valid_records, writer

TTL_S = 3


def test_capture_tables_keep_records_for_their_ttl_then_nothing_reads_them(tmp_path: Path) -> None:
    gateway = start_gateway(tmp_path / "hbase")
    conn = happybase.Connection("127.0.0.1", gateway.port)
    try:
        captures.ensure_capture_tables(conn, TTL_S)
        surveillance.ensure_surveillance_tables(conn, 7 * 86_400)
        for table in captures.TABLES:
            assert {f["time_to_live"] for f in conn.table(table).families().values()} == {TTL_S}, table
        assert conn.table(surveillance.BY_WATCH_TABLE).families()[b"h"]["time_to_live"] == 7 * 86_400
        pairs = list(valid_records(20))
        write_puts(puts_for(pairs), writer(gateway.port))
        close_cached_clients()
        vehicle = next(r for k, r in pairs if k is Kind.VEHICLE)
        main_table = conn.table(Kind.VEHICLE.value)
        assert main_table.row(captures.record_key(vehicle["record_id"]))
        assert list(conn.table("vehicle_by_plate").scan(row_prefix=captures.plate_prefix(vehicle["plate_number"])))
        time.sleep(TTL_S + 1)
        assert main_table.row(captures.record_key(vehicle["record_id"])) == {}
        assert not list(conn.table("vehicle_by_plate").scan(row_prefix=captures.plate_prefix(vehicle["plate_number"])))
        assert not list(main_table.scan(limit=5))
        captures.ensure_capture_tables(conn, 86_400)  # the tables exist: they keep the TTL they were made with
        assert main_table.families()[b"r"]["time_to_live"] == TTL_S
    finally:
        conn.close()
        gateway.kill()
