"""The hit loader (``python -m surveillance.loader [--config F]``): ``surveillance.hits`` -> HBase.

A consumer-group member (group ``surveillance-loader``; add instances and the partitions rebalance)
that writes each batch of hits to the ``surveillance_hit`` tables (:mod:`contracts.tables.surveillance`)
and commits the batch's offsets only after HBase took the rows. Row keys end in the hit's
deterministic ``hit_id``, so whatever is read twice (a kill -9 between write and commit, a replay by
the service) rewrites the same rows: at-least-once reading, exactly-once rows. A hit that cannot be a
row (not JSON, no ``hit_id``, a bad time, ids too long for a row key) is skipped, counted and logged,
never retried forever; an HBase failure is retried (with the same batch, uncommitted) until it works or
the loader is stopped.

The DR site runs the same loader against its own bus and HBase (``--bootstrap-server``,
``--hbase-host``, ``--hbase-port`` override the config), which is how its hit history is rebuilt from
the mirrored topic.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import happybase
from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

from contracts import bus_client
from contracts.config import Config, add_config_flag, preparse_config
from contracts.hbase import HBaseClient
from contracts.logs import add_log_flags
from contracts.logs import setup as setup_logs
from contracts.retention import Retention
from contracts.surveillance import parse_hit
from contracts.tables.surveillance import ensure_surveillance_tables, hit_rows
from contracts.topics import Topics

from .skipped import UNREADABLE

log = logging.getLogger("surveillance.loader")
PRINCIPAL = "hit-loader"
"""The loader's bus identity (:data:`contracts.bus_client.PRINCIPALS`)."""
MAX_ROW_KEY = 32767
"""HBase's longest row key (``Short.MAX_VALUE`` bytes); a hit's keys hold its ids, a foreign hit's any length."""


@dataclass(frozen=True)
class LoaderSettings:
    bus: dict[str, str] = field(default_factory=lambda: {"bootstrap.servers": "127.0.0.1:9092"}, repr=False)
    """The :data:`PRINCIPAL`'s client settings (:func:`contracts.bus_client.librdkafka`); may hold its password."""
    hbase: HBaseClient = field(default_factory=HBaseClient)
    group_id: str = "surveillance-loader"
    topic: str = "surveillance.hits"
    batch_size: int = 500
    poll_timeout_s: float = 0.5
    retry_s: float = 2.0
    """Pause before writing a batch again after HBase failed."""
    hits_ttl_s: int = Retention().hits_ttl_s
    """How long hits are kept (``[retention] hits_days``), given to the tables this loader creates."""

    @classmethod
    def from_config(cls, config: Config, bootstrap: str | None = None, principal: str = PRINCIPAL,
                    hbase_host: str | None = None, hbase_port: int | None = None, **overrides: Any) -> LoaderSettings:
        """The settings from ``config``; ``bootstrap`` (``--bootstrap-server``) overrides where the bus is,
        ``principal`` (``--bus-principal``: the DR site's loaders are ``dr-loaders``) whose identity it uses,
        ``hbase_host`` / ``hbase_port`` where HBase is, the other ``overrides`` (None: not given) replace fields."""
        default = cls()
        values = {
            "bus": bus_client.librdkafka(config, principal, bootstrap),
            "hbase": HBaseClient.from_config(config, host=hbase_host, port=hbase_port),
            "group_id": config.get("surveillance", "loader_group", default.group_id),
            "topic": Topics.from_config(config).surveillance_hits,
            "hits_ttl_s": Retention.from_config(config).hits_ttl_s,
        }
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)


@dataclass
class Counts:
    loaded: int = 0
    skipped: int = 0
    batches: int = 0


def rows_of(messages: Sequence[Message], counts: Counts) -> dict[str, dict[bytes, dict[bytes, bytes]]]:
    """Rows per table for a batch of messages; malformed hits are counted and left out."""
    tables: dict[str, dict[bytes, dict[bytes, bytes]]] = {}
    for message in messages:
        try:
            rows = hit_rows(parse_hit(message.value()))
            longest = max(len(key) for _table, key, _cells in rows)
            if longest > MAX_ROW_KEY:  # HBase would refuse the batch at every retry: the loader would stall on it
                raise ValueError(f"a row key of {longest} bytes (HBase takes at most {MAX_ROW_KEY})")
        except UNREADABLE as exc:  # not a hit (not even JSON), a time that is not one, ids too long for a row
            counts.skipped += 1
            log.warning("skipped a malformed hit at %s[%d]@%d: %s", message.topic(), message.partition(),
                        message.offset(), f"{type(exc).__name__}: {exc}"[:200])
            continue
        for table, key, cells in rows:
            tables.setdefault(table, {})[key] = cells
        counts.loaded += 1
    return tables


class Loader:
    def __init__(self, settings: LoaderSettings) -> None:
        self.settings = settings
        self.counts = Counts()
        self._connection: happybase.Connection | None = None

    def _hbase(self) -> happybase.Connection:
        if self._connection is None:
            s = self.settings
            self._connection = s.hbase.connect()
            ensure_surveillance_tables(self._connection, s.hits_ttl_s)
        return self._connection

    def _write(self, tables: dict[str, dict[bytes, dict[bytes, bytes]]], stop: threading.Event) -> bool:
        """Write every row, retrying HBase failures; False if stopped before it worked."""
        while not stop.is_set():
            try:
                connection = self._hbase()
                for table, rows in tables.items():
                    with connection.table(table).batch() as batch:
                        for key, cells in rows.items():
                            batch.put(key, cells)
                return True
            except Exception as exc:  # thrift transport, socket and server errors alike: the batch waits
                log.warning("HBase write failed (%s: %s); retrying in %.0f s", type(exc).__name__, exc,
                            self.settings.retry_s)
                if self._connection is not None:
                    self._connection.close()
                self._connection = None
                stop.wait(self.settings.retry_s)
        return False

    def run(self, stop: threading.Event) -> None:
        """Load until ``stop`` is set; the last batch is written and committed, or left for the next run."""
        s = self.settings
        consumer = Consumer({**s.bus, "group.id": s.group_id,
                             "enable.auto.commit": False, "auto.offset.reset": "earliest",
                             "partition.assignment.strategy": "cooperative-sticky",
                             "logger": logging.getLogger("surveillance.loader.bus")})
        consumer.subscribe([s.topic])
        try:
            while not stop.is_set():
                messages = consumer.consume(s.batch_size, s.poll_timeout_s)
                good = []
                for message in messages:
                    error = message.error()
                    if error is None:
                        good.append(message)
                    elif error.code() != KafkaError._PARTITION_EOF:
                        log.warning("bus: %s", error)
                if not good:
                    continue
                if not self._write(rows_of(good, self.counts), stop):
                    return  # stopped with the batch unwritten: uncommitted, so the next run reads it again
                self.counts.batches += 1
                consumer.commit(offsets=_next_offsets(good), asynchronous=False)
        finally:
            consumer.close()
            if self._connection is not None:
                self._connection.close()
            log.info("loader stopped: %d hits loaded, %d malformed skipped", self.counts.loaded, self.counts.skipped)


def _next_offsets(messages: Sequence[Message]) -> list[TopicPartition]:
    """Per partition, the offset after the batch's last message there (what a commit stores)."""
    last: dict[tuple[str, int], int] = {}
    for message in messages:
        key = (message.topic(), message.partition())
        last[key] = max(last.get(key, -1), message.offset())
    return [TopicPartition(topic, partition, offset + 1) for (topic, partition), offset in last.items()]


def main(argv: list[str] | None = None) -> int:
    config = preparse_config(argv)
    parser = argparse.ArgumentParser(prog="python -m surveillance.loader", description=__doc__.split("\n\n")[0])
    add_config_flag(parser)
    parser.add_argument("--bootstrap-server", help="override [bus] bootstrap_servers (and the principal's file's)")
    parser.add_argument("--hbase-host", help="override [hbase] host")
    parser.add_argument("--hbase-port", type=int, help="override [hbase] port")
    parser.add_argument("--group", dest="group_id", help="consumer group (default surveillance-loader)")
    parser.add_argument("--bus-principal", choices=bus_client.PRINCIPALS, default=PRINCIPAL,
                        help=f"the bus identity to log in as (default {PRINCIPAL}; the DR site's: dr-loaders)")
    add_log_flags(parser)
    args = parser.parse_args(argv)
    setup_logs("hit-loader", args.log_format, args.log_level)
    try:
        settings = LoaderSettings.from_config(config, args.bootstrap_server, args.bus_principal,
                                              hbase_host=args.hbase_host, hbase_port=args.hbase_port,
                                              group_id=args.group_id)
    except bus_client.BusCredentialsError as exc:
        print(f"hit loader: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    log.info("loading %s -> %s (group %s)", settings.topic, settings.hbase.where, settings.group_id)
    Loader(settings).run(stop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
