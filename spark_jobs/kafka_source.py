"""A Spark streaming source for the bus: PySpark 4's Python Data Source with Spark's Kafka-source API.

Spark's own Kafka connector is not in the pyspark distribution (and Maven is out of reach here),
so this source speaks the Kafka protocol with confluent-kafka instead, keeping the connector's
option names and columns so a job switches between the two with ``format("bus")`` /
``format("kafka")``:

* options: ``kafka.bootstrap.servers`` (and any other ``kafka.*`` consumer setting; the bus login in Kafka's Java
  names, ``kafka.security.protocol``, ``kafka.sasl.jaas.config``, ``kafka.ssl.truststore.location``... as
  :func:`contracts.bus_client.spark_options` gives them, is turned into librdkafka's), exactly one of
  ``subscribe`` / ``subscribePattern`` / ``assign``, ``startingOffsets`` (earliest, latest, JSON),
  ``maxOffsetsPerTrigger``, ``failOnDataLoss``, ``minPartitions``, ``includeHeaders``,
  ``kafkaConsumer.pollTimeoutMs``; ``kafka.group.id`` additionally gets the processed offsets
  committed (for lag monitoring; the Spark checkpoint stays the truth);
* columns: key, value, topic, partition, offset, timestamp, timestampType (+ headers).

How Spark drives it: the reader object lives twice, in a long-lived driver
process (offsets, planning, commit) and pickled into each task for :meth:`read`. So ``__init__``
only stores parsed options, the driver's metadata client is opened lazily and never pickled, and
each :class:`OffsetRangePartition` carries all a task needs. Tasks read their offset range with
``assign`` (no group management), one per partition range, on the executors.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from contracts import bus_client

from . import offsets as off

log = logging.getLogger("spark_jobs.kafka_source")

SHORT_NAME = "bus"
BASE_SCHEMA = ("key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
               "timestampType int")
HEADERS_SCHEMA = ", headers array<struct<key: string, value: binary>>"
ARROW_BATCH_ROWS = 10_000
CONSUME_CHUNK = 500
METADATA_TIMEOUT_S = 15.0
TIMESTAMP_RANGE_MS = (-62_135_596_800_000, 253_402_300_799_999)
"""Spark's (and Python's) timestamps: 0001-01-01 to 9999-12-31 UTC. A producer may stamp a record with any 64-bit
milliseconds; one outside reads as null (a microsecond column overflows, or its row has no datetime) instead of
failing every batch that reads the record."""


@dataclass(frozen=True)
class SourceOptions:
    """Spark Kafka-source options, parsed and checked once on the driver (picklable, immutable)."""

    bus: tuple[tuple[str, str], ...] = field(repr=False)
    """How to reach the bus: librdkafka settings (bootstrap servers, and the login when it is secured)."""
    subscribe: tuple[str, ...] = ()
    subscribe_pattern: str | None = None
    assign: tuple[tuple[str, int], ...] = ()
    starting: str | dict[tuple[str, int], int] = "latest"
    max_offsets_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    min_partitions: int | None = None
    include_headers: bool = False
    poll_timeout_s: float = 120.0
    group_id: str | None = None
    consumer_config: tuple[tuple[str, str], ...] = field(default_factory=tuple)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        opts = {k.lower(): v for k, v in options.items()}
        if not opts.get("kafka.bootstrap.servers"):
            raise ValueError('option "kafka.bootstrap.servers" is required')
        chosen = [k for k in ("subscribe", "subscribepattern", "assign") if opts.get(k)]
        if len(chosen) != 1:
            raise ValueError('exactly one of "subscribe", "subscribePattern" or "assign" must be given')
        assign: tuple[tuple[str, int], ...] = ()
        if "assign" in chosen:
            try:
                assign = tuple(sorted(off.from_json({t: {str(p): 0 for p in ps} for t, ps in
                                                     json.loads(opts["assign"]).items()})))
            except (json.JSONDecodeError, AttributeError, TypeError, ValueError) as exc:
                raise ValueError(f'"assign" must be JSON like {{"topicA":[0,1]}}, not {opts["assign"]!r}') from exc
        pattern = opts.get("subscribepattern")
        if pattern is not None:
            re.compile(pattern)
        reserved = {"kafka.group.id", "kafka.auto.offset.reset", "kafka.enable.auto.commit", "kafka.key.deserializer",
                    "kafka.value.deserializer", *(f"kafka.{key}" for key in bus_client.from_spark_options(opts))}
        consumer_config = tuple(sorted((k[len("kafka."):], v) for k, v in opts.items()
                                       if k.startswith("kafka.") and k not in reserved))
        return cls(
            bus=tuple(sorted(bus_settings(opts).items())),
            subscribe=tuple(t.strip() for t in opts.get("subscribe", "").split(",") if t.strip()),
            subscribe_pattern=pattern,
            assign=assign,
            starting=off.parse_starting(opts.get("startingoffsets", "latest")),
            max_offsets_per_trigger=_positive(opts, "maxoffsetspertrigger"),
            fail_on_data_loss=_flag(opts, "failondataloss", True),
            min_partitions=_positive(opts, "minpartitions"),
            include_headers=_flag(opts, "includeheaders", False),
            poll_timeout_s=int(opts.get("kafkaconsumer.polltimeoutms", "120000")) / 1000.0,
            group_id=opts.get("kafka.group.id"),
            consumer_config=consumer_config,
        )

    def consumer_settings(self) -> dict[str, Any]:
        """librdkafka settings for reading by assignment: never auto-commit, out-of-range is an error."""
        return {
            **dict(self.bus),
            "group.id": self.group_id or "spark-bus-source",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "error",
            "enable.partition.eof": False,
            **dict(self.consumer_config),
        }


def bus_settings(options: Mapping[str, str]) -> dict[str, str]:
    """The bus settings Spark's ``kafka.*`` options carry (:func:`contracts.bus_client.spark_options`), in librdkafka's
    names: what the source's consumers and a job's own producers connect with."""
    return bus_client.to_librdkafka(bus_client.from_spark_options(options))


def _flag(opts: Mapping[str, str], name: str, default: bool) -> bool:
    value = opts.get(name)
    if value is None:
        return default
    if value.lower() not in ("true", "false"):
        raise ValueError(f'option "{name}" must be true or false, not {value!r}')
    return value.lower() == "true"


def _positive(opts: Mapping[str, str], name: str) -> int | None:
    value = opts.get(name)
    if value is None:
        return None
    number = int(value)
    if number <= 0:
        raise ValueError(f'option "{name}" must be positive, not {value!r}')
    return number


class BusKafkaDataSource(DataSource):
    """``spark.dataSource.register(BusKafkaDataSource)``, then ``readStream.format("bus")``."""

    @classmethod
    def name(cls) -> str:
        return SHORT_NAME

    def schema(self) -> str:
        include = _flag({k.lower(): v for k, v in self.options.items()}, "includeheaders", False)
        return BASE_SCHEMA + (HEADERS_SCHEMA if include else "")

    def streamReader(self, schema: StructType) -> BusKafkaStreamReader:
        return BusKafkaStreamReader(SourceOptions.parse(self.options))


class OffsetRangePartition(InputPartition):
    """One task's work: an offset range of one partition, and the options to read it with."""

    def __init__(self, rng: off.Range, options: SourceOptions) -> None:
        super().__init__(rng)
        self.range = rng
        self.options = options


class BusKafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._metadata: Any = None  # driver-side confluent consumer (offset commits), opened on first use
        self._admin_client: Any = None  # driver-side admin client (topics and offsets), opened on first use
        self._target: off.Offsets | None = None
        self._last_marks: off.Watermarks | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_metadata"] = None
        state["_admin_client"] = None
        state["_last_marks"] = None
        return state

    # -- driver side -------------------------------------------------------------------------
    def _client(self) -> Any:
        if self._metadata is None:
            from confluent_kafka import Consumer

            self._metadata = Consumer({**self.options.consumer_settings(), "client.id": "spark-bus-source-driver"})
        return self._metadata

    def _admin(self) -> Any:
        if self._admin_client is None:
            from confluent_kafka.admin import AdminClient

            self._admin_client = AdminClient({**dict(self.options.bus), "client.id": "spark-bus-source-driver"})
        return self._admin_client

    def _partitions(self) -> list[tuple[str, int]]:
        o = self.options
        if o.assign:
            return list(o.assign)
        topics = self._admin().list_topics(timeout=METADATA_TIMEOUT_S).topics
        if o.subscribe_pattern is not None:
            pattern = re.compile(o.subscribe_pattern)
            names = [t for t in topics if pattern.fullmatch(t) and not t.startswith("__")]
        else:
            names = [t for t in o.subscribe if t in topics]
        return sorted((t, p) for t in names for p in topics[t].partitions)

    def watermarks(self) -> off.Watermarks:
        """Each partition's log start and end, asked for every partition at once: one ListOffsets request per bound
        and broker, not two per partition one after the other (librdkafka's get_watermark_offsets), round trips
        that on a loaded machine delayed the planning of every micro-batch."""
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin import OffsetSpec

        parts = [TopicPartition(topic, partition) for topic, partition in self._partitions()]
        if not parts:
            return {}
        admin = self._admin()
        low = admin.list_offsets({tp: OffsetSpec.earliest() for tp in parts}, request_timeout=METADATA_TIMEOUT_S)
        high = admin.list_offsets({tp: OffsetSpec.latest() for tp in parts}, request_timeout=METADATA_TIMEOUT_S)
        return {(tp.topic, tp.partition): (low[tp].result().offset, high[tp].result().offset) for tp in parts}

    def initialOffset(self) -> dict:
        return off.to_json(off.resolve_starting(self.options.starting, self.watermarks()))

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_offsets_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        marks = self._last_marks = self.watermarks()
        begin = off.check_progress(off.from_json(start), marks, self.options.fail_on_data_loss)
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        return off.to_json(off.latest(begin, marks, max_rows, self._target))

    def reportLatestOffset(self) -> dict | None:
        """For progress reports only: the high watermarks latestOffset just fetched (no extra round trip)."""
        marks = self._last_marks if self._last_marks is not None else self.watermarks()
        return off.to_json({tp: high for tp, (_, high) in marks.items()})

    def prepareForTriggerAvailableNow(self) -> None:
        """Fix the target of an availableNow run: what is there now, and nothing added later."""
        self._target = {tp: high for tp, (_, high) in self.watermarks().items()}

    def partitions(self, start: dict, end: dict) -> list[OffsetRangePartition]:
        begin = off.from_json(start)
        finish = off.from_json(end)
        if set(finish) - set(begin):  # partitions new in this batch start at their earliest offset
            marks = self.watermarks()
            begin.update({tp: marks.get(tp, (off.EARLIEST, 0))[0] for tp in set(finish) - set(begin)})
        for tp, until in finish.items():
            if until < begin[tp]:
                begin[tp] = until  # offsets went back: reported by check_progress, nothing to read here
        return [OffsetRangePartition(r, self.options) for r in off.plan(begin, finish, self.options.min_partitions)]

    def commit(self, end: dict) -> None:
        """Spark calls this one batch late; with ``kafka.group.id`` the offsets go to that group for lag views."""
        if not self.options.group_id:
            return
        from confluent_kafka import TopicPartition

        parts = [TopicPartition(t, p, o) for (t, p), o in off.from_json(end).items()]
        try:
            self._client().commit(offsets=parts, asynchronous=False)
        except Exception as exc:  # informational only: the checkpoint holds the real progress
            log.warning("could not commit offsets to group %s: %s", self.options.group_id, exc)

    def stop(self) -> None:
        self._admin_client = None
        if self._metadata is not None:
            self._metadata.close()
            self._metadata = None

    # -- executor side -----------------------------------------------------------------------
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, OffsetRangePartition)
        yield from read_range(partition.range, partition.options)


_CONSUMERS: dict[tuple, Any] = {}
"""Per Python worker, one consumer per distinct setting: Spark reuses workers, so tasks after the
first skip the connection set-up (as Spark's Kafka connector caches its consumers)."""


def _consumer(options: SourceOptions) -> Any:
    from confluent_kafka import Consumer

    key = tuple(sorted(options.consumer_settings().items()))
    consumer = _CONSUMERS.get(key)
    if consumer is None:
        consumer = _CONSUMERS[key] = Consumer({**options.consumer_settings(), "client.id": "spark-bus-source"})
    return consumer


def close_cached_consumers() -> None:
    """Close this process's task consumers (for processes that outlive their brokers, e.g. tests)."""
    while _CONSUMERS:
        _CONSUMERS.popitem()[1].close()


def read_range(rng: off.Range, options: SourceOptions) -> Iterator[pa.RecordBatch]:
    """Fetch ``[start, until)`` of one partition as Arrow batches of the source's columns.

    The start may have been deleted since planning (retention, DeleteRecords): that is data loss,
    an error unless ``failOnDataLoss`` is false, when reading resumes at the log start. Offsets
    missing inside the range (compaction, transaction markers) are simply not there.
    """
    from confluent_kafka import KafkaError, TopicPartition

    consumer = _consumer(options)
    tp = TopicPartition(rng.topic, rng.partition)
    low, _high = consumer.get_watermark_offsets(tp, timeout=METADATA_TIMEOUT_S)
    position = low if rng.start == off.EARLIEST else rng.start
    if position < low:
        position = _data_lost(rng, position, low, options)
    builder = _BatchBuilder(rng.topic, rng.partition, options.include_headers)
    deadline = time.monotonic() + options.poll_timeout_s
    consumer.assign([TopicPartition(rng.topic, rng.partition, position)])
    try:
        while position < rng.until:
            # consume() returns once it has num_messages or at the timeout: ask for what librdkafka
            # has prefetched (a fetch's worth) so a partial answer never waits out the timeout.
            messages = consumer.consume(num_messages=min(rng.until - position, CONSUME_CHUNK), timeout=0.1)
            for message in messages:
                error = message.error()
                if error is not None:
                    if error.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
                        low, _ = consumer.get_watermark_offsets(tp, timeout=METADATA_TIMEOUT_S)
                        position = _data_lost(rng, position, low, options)
                        consumer.assign([TopicPartition(rng.topic, rng.partition, position)])
                        break
                    if error.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise RuntimeError(f"reading {rng.topic}-{rng.partition}: {error}")
                if message.offset() >= rng.until:
                    position = rng.until
                    break
                builder.add(message)
                position = message.offset() + 1
            if builder.rows >= ARROW_BATCH_ROWS:
                yield builder.flush()
            if position < rng.until and not messages:
                # Nothing came: past the last offset there may only be markers or compacted holes.
                current = consumer.position([tp])[0].offset
                if current >= rng.until:
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no records from {rng.topic}-{rng.partition} at {position} "
                                       f"within {options.poll_timeout_s}s (range ends at {rng.until})")
            else:
                deadline = time.monotonic() + options.poll_timeout_s
    finally:
        consumer.unassign()
    if builder.rows:
        yield builder.flush()


def _data_lost(rng: off.Range, wanted: int, low: int, options: SourceOptions) -> int:
    message = (f"{rng.topic}-{rng.partition}: offsets {wanted}..{min(low, rng.until) - 1} were deleted "
               f"(log starts at {low}). {off.DATA_LOSS_HINT}")
    if options.fail_on_data_loss:
        raise off.DataLossError(message)
    log.warning("%s", message)
    return min(low, rng.until)


class _BatchBuilder:
    """Column lists for one Arrow batch in the source's schema."""

    def __init__(self, topic: str, partition: int, include_headers: bool) -> None:
        self.topic = topic
        self.partition = partition
        self.include_headers = include_headers
        self._reset()

    def _reset(self) -> None:
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.offsets: list[int] = []
        self.timestamps: list[int | None] = []
        self.types: list[int] = []
        self.headers: list[list[dict[str, Any]]] = []

    @property
    def rows(self) -> int:
        return len(self.offsets)

    def add(self, message: Any) -> None:
        kind, stamp = message.timestamp()
        self.keys.append(message.key())
        self.values.append(message.value())
        self.offsets.append(message.offset())
        # librdkafka: 1 = CreateTime, 2 = LogAppendTime; Spark's column: 0 and 1.
        low, high = TIMESTAMP_RANGE_MS
        self.timestamps.append(stamp * 1000 if kind and low <= stamp <= high else None)
        self.types.append(max(kind - 1, 0))
        if self.include_headers:
            self.headers.append([{"key": k, "value": v} for k, v in (message.headers() or [])])

    def flush(self) -> pa.RecordBatch:
        n = self.rows
        arrays = [
            pa.array(self.keys, pa.binary()),
            pa.array(self.values, pa.binary()),
            pa.array([self.topic] * n, pa.string()),
            pa.array([self.partition] * n, pa.int32()),
            pa.array(self.offsets, pa.int64()),
            pa.array(self.timestamps, pa.timestamp("us", tz="UTC")),
            pa.array(self.types, pa.int32()),
        ]
        names = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
        if self.include_headers:
            header = pa.struct([("key", pa.string()), ("value", pa.binary())])
            arrays.append(pa.array(self.headers, pa.list_(header)))
            names.append("headers")
        batch = pa.RecordBatch.from_arrays(arrays, names=names)
        self._reset()
        return batch
