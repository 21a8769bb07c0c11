"""Helpers for the ingest tests: count the rows the ingest job wrote to HBase, read a topic back.

The simulator and the Spark job are started by `deploy/processes/ingest.py`."""

from __future__ import annotations

import happybase
from confluent_kafka import Consumer, TopicPartition

from contracts.tables import captures


def count_rows(conn: happybase.Connection, table: str) -> int:
    """Rows in ``table``; 0 while the job has not created it yet."""
    if table.encode() not in conn.tables():
        return 0
    column = {"vehicle_by_plate": b"i:row", "capture_by_checkpoint": b"i:row", "vehicle_by_district": b"i:v",
              "vehicle_by_brand": b"i:v"}.get(table, b"r:capture_time")
    return sum(1 for _ in conn.table(table).scan(batch_size=2000, columns=[column]))


def row_counts(conn: happybase.Connection) -> dict[str, int]:
    return {name: count_rows(conn, name) for name in captures.TABLES}


def read_all(bootstrap: str, topic: str) -> list[tuple[bytes, bytes]]:
    """Every (key, value) of partition 0 of ``topic``, from its start."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "t", "enable.auto.commit": False})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        consumer.assign([TopicPartition(topic, 0, low)])
        out: list[tuple[bytes, bytes]] = []
        while len(out) < high - low:
            out += [(m.key(), m.value()) for m in consumer.consume(1000, 5) if not m.error()]
        return out
    finally:
        consumer.close()
