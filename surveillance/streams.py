"""The surveillance stages' door to the bus: clients from the settings, the command log, commit-after-ack.

Every stage is the same loop (Kafka Streams' at-least-once processing): consume a batch, compute the
outputs of each record, produce them with an idempotent producer, and commit a record's offset only once
the outputs of that record and of every record before it in its partition are acknowledged. A crash then
replays at most the records whose outputs were not all acknowledged, and their outputs carry the same
deterministic ids. Commands come from compacted control topics read whole, without a group (every
instance needs every command), applied up to the end offsets seen at start before any capture is read.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from contracts.records import encode, now_time
from contracts.surveillance import REJECTED, reply_record
from contracts.topics import NEW_TOPIC_ERRORS

from . import metrics
from .settings import Settings
from .skipped import skip

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Output:
    """One record to publish; ``value`` None is a tombstone; ``partition`` None: the key's partition."""

    topic: str
    key: bytes | None
    value: bytes | None
    partition: int | None = None


Handler = Callable[[Sequence[Message]], Sequence[Sequence[Output]]]
"""A stage's work: per consumed record (same order), the outputs it causes (possibly none)."""
Apply = Callable[[bytes | None, bytes | None], None]
"""Applies one command record (key, value; value None = tombstone)."""


STANDBY_POLL_S = 0.5
"""How long a standing-by stage waits between looks at its commands and the site record."""
URGENT_WAIT_MS = 100
"""``fetch.wait.max.ms`` of the watch stage's consumer. The broker answers a waiting fetch as soon as a record lands
(Kafka's DelayedFetch), so this bounds only how often an idle consumer asks again, not how late a capture is seen. At
10 ms, the watch consumer and the command logs' 50 ms kept an idle `make up`'s broker at 19 % of a core answering
empty fetches over TLS."""
COMMAND_LOG_WAIT_MS = 250
"""``fetch.wait.max.ms`` of a command log: new commands are woken up by the broker like records; reading a log to its
end at start takes up to this much longer (its last, empty fetch waits it out)."""
BATCHED = {"fetch.wait.max.ms": 250, "fetch.min.bytes": 65_536}
"""Consumer settings of a stage whose outputs are not urgent (cloned plates, statistics): a fetch waits for 64 KB or
250 ms. With the watch stage's 10 ms each of the four analytics consumers fetched every few records, and under `make
up` the broker answered ~580 fetches a second, a sixth of a core on a 2-core machine."""


def make_consumer(settings: Settings, group: str, client: str, **extra: Any) -> Consumer:
    """A group member that never commits by itself (the loop commits after the acks)."""
    return Consumer({**settings.bus, "group.id": group,
                     "client.id": f"{client}@{settings.instance}", "enable.auto.commit": False,
                     "auto.offset.reset": "earliest", "log_level": 3, "session.timeout.ms": 10_000,
                     "heartbeat.interval.ms": 1_000, "topic.metadata.refresh.interval.ms": 5_000,
                     "fetch.wait.max.ms": URGENT_WAIT_MS, **extra})


def make_producer(settings: Settings, client: str, **extra: Any) -> Producer:
    """Idempotent (a retried batch is written once), acks=all, short linger: a hit is urgent."""
    return Producer({**settings.bus, "client.id": f"{client}@{settings.instance}",
                     "enable.idempotence": True, "acks": "all", "linger.ms": 2, "log_level": 3,
                     "queue.buffering.max.messages": 200_000, **extra})


def make_admin(settings: Settings) -> AdminClient:
    """An admin client (topic metadata and creation), quiet at info level."""
    return AdminClient({**settings.bus, "log_level": 3})


@dataclass(frozen=True)
class TopicSpec:
    partitions: int
    config: Mapping[str, str] = field(default_factory=dict)


COMPACTED = {"cleanup.policy": "compact"}


def service_topics(settings: Settings) -> dict[str, TopicSpec]:
    """The topics every stage reads or writes (stages with private topics add theirs)."""
    t, n = settings.topics, settings.partitions
    return {t.vehicle: TopicSpec(n), t.face: TopicSpec(n), t.surveillance_hits: TopicSpec(n),
            t.surveillance_stats: TopicSpec(n), t.alerts: TopicSpec(1),
            t.control_watchlist: TopicSpec(1, COMPACTED), t.control_stats: TopicSpec(1, COMPACTED),
            t.surveillance_replies: TopicSpec(1, COMPACTED)}


def repartition_topic(settings: Settings, topic: str, inputs: Sequence[str],
                      retention_s: float) -> dict[str, TopicSpec]:
    """An internal repartition topic (Kafka Streams' ``-repartition``): as many partitions as the largest of
    ``inputs`` has (or will be created with), delete policy, ``retention_s``."""
    admin = make_admin(settings)
    existing = admin.list_topics(timeout=15).topics
    counts = [len(existing[t].partitions) for t in inputs if t in existing and existing[t].error is None]
    config = {"cleanup.policy": "delete", "retention.ms": str(round(retention_s * 1000))}
    return {topic: TopicSpec(max(counts, default=settings.partitions), config)}


def wait_for_topics(settings: Settings, names: Iterable[str], stop: threading.Event) -> bool:
    """Wait until every topic of ``names`` exists (at a standing-by site the mirror creates them); False if ``stop``
    came first. The topics still missing are logged once a minute."""
    admin, wanted, said = make_admin(settings), set(names), 0.0
    while not stop.is_set():
        try:
            missing = wanted - set(admin.list_topics(timeout=10).topics)
        except KafkaException as exc:
            missing = wanted
            log.info("cannot list the topics yet: %s", exc)
        if not missing:
            return True
        if time.monotonic() - said >= 60:
            log.info("standing by until the mirror brings %s", ", ".join(sorted(missing)))
            said = time.monotonic()
        stop.wait(1.0)
    return False


def ensure_topics(settings: Settings, specs: Mapping[str, TopicSpec], timeout: float = 15.0) -> None:
    """Create the topics that do not exist yet (existing ones are left as they are)."""
    admin = make_admin(settings)
    existing = set(admin.list_topics(timeout=timeout).topics)
    wanted = [NewTopic(name, spec.partitions, config=dict(spec.config))
              for name, spec in specs.items() if name not in existing]
    if not wanted:
        return
    for name, future in admin.create_topics(wanted, request_timeout=timeout).items():
        try:
            future.result(timeout)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise RuntimeError(f"cannot create topic {name}: {exc}") from exc


class CommandLog:
    """A compacted control topic read whole by this instance: assigned, not subscribed, never committed."""

    def __init__(self, settings: Settings, topic: str, client: str) -> None:
        self.topic = topic
        self._consumer = Consumer({**settings.bus, "group.id": f"surveillance-{client}-unused",
                                   "client.id": f"{client}@{settings.instance}", "enable.auto.commit": False,
                                   "enable.partition.eof": True, "log_level": 3,
                                   "fetch.wait.max.ms": COMMAND_LOG_WAIT_MS,
                                   "topic.metadata.refresh.interval.ms": 5_000})

    def _ends(self, timeout: float) -> dict[int, int]:
        """End offset per partition. A topic just created may be unknown for a moment to the broker asked, or not
        led yet by the leader Metadata names (KRaft brokers learn it from the metadata log after the controller
        answered; librdkafka does not retry these for a watermark query), so those are asked again until ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                metadata = self._consumer.list_topics(self.topic, timeout=timeout).topics[self.topic]
                if metadata.error is not None:
                    raise KafkaException(metadata.error)
                return {p: self._consumer.get_watermark_offsets(TopicPartition(self.topic, p), timeout=timeout)[1]
                        for p in metadata.partitions}
            except KafkaException as exc:
                if exc.args[0].code() not in NEW_TOPIC_ERRORS or time.monotonic() > deadline:
                    raise RuntimeError(f"control topic {self.topic}: {exc.args[0]}") from exc
            time.sleep(0.1)

    def catch_up(self, apply: Apply, timeout: float = 60.0) -> int:
        """Apply every command up to the end offsets seen now; returns how many records were applied.

        ``timeout`` bounds a stall (no record for that long), not the whole read: a big watchlist takes
        as long as it takes."""
        ends = self._ends(timeout)
        self._consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in ends])
        pending = {p for p, end in ends.items() if end > 0}
        reached = dict.fromkeys(ends, 0)
        applied = 0
        deadline = time.monotonic() + timeout
        while pending:
            if time.monotonic() > deadline:
                raise TimeoutError(f"control topic {self.topic}: nothing read for {timeout} s before its end "
                                   f"(read up to {reached}, ends {ends})")
            messages = self._consumer.consume(500, 0.2)
            if messages:
                deadline = time.monotonic() + timeout
            for message in messages:
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF and message.offset() >= ends[message.partition()]:
                        pending.discard(message.partition())
                    elif error.code() != KafkaError._PARTITION_EOF:
                        log.warning("control topic %s: %s", self.topic, error)
                    continue
                apply(message.key(), message.value())
                applied += 1
                reached[message.partition()] = message.offset() + 1
                if message.offset() + 1 >= ends[message.partition()]:
                    pending.discard(message.partition())
        return applied

    def poll_to_end(self, apply: Apply, timeout: float = 10.0) -> int:
        """Apply, from where tailing left off, every command published up to now (the end offsets seen now):
        for a stage that meets a record naming a command it has not read yet."""
        assigned = self._consumer.assignment()
        ends = {tp.partition: self._consumer.get_watermark_offsets(tp, timeout=timeout)[1] for tp in assigned}
        applied = 0
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            positions = {tp.partition: tp.offset for tp in self._consumer.position(assigned)}
            if all(positions[p] >= end or end == 0 for p, end in ends.items()):
                break
            applied += self.poll(apply, 0.1)
        return applied

    def poll(self, apply: Apply, timeout: float = 0.0) -> int:
        """Apply the commands published since (tailing); never blocks longer than ``timeout``."""
        applied = 0
        for message in self._consumer.consume(500, timeout):
            if message.error() is None:
                apply(message.key(), message.value())
                applied += 1
        return applied

    def close(self) -> None:
        self._consumer.close()


REPLY_ID_CHARS, REPLY_REASON_CHARS = 256, 1000
"""A reply (and the log line of a rejection) names a command and why it was refused in at most this many
characters: a foreign command's key may be as large as a record can be, and a reply echoing it (twice)
would not fit in one."""


class Replies:
    """Publishes what this instance did with each command on ``surveillance.replies`` (key = the id)."""

    def __init__(self, settings: Settings, producer: Producer) -> None:
        self._topic = settings.topics.surveillance_replies
        self._instance = settings.instance
        self._producer = producer
        self._standing_by = settings.standing_by

    def send(self, command_id: str, command: str, status: str, reason: str = "") -> None:
        """Count and publish what was done with a command (and log a rejection, with its reason). Standing by,
        nothing is published: the active site answered the command, and the mirror brings its reply."""
        metrics.COMMANDS.labels(command, status).inc()
        command_id, reason = command_id[:REPLY_ID_CHARS], reason[:REPLY_REASON_CHARS]
        if status == REJECTED:
            log.info("%s %r rejected: %s", command, command_id, reason)
        if self._standing_by():
            return
        value = reply_record(command_id, command, status, reason, now_time(), self._instance)
        while True:
            try:
                self._producer.produce(self._topic, encode(value), command_id.encode())
                return
            except BufferError:  # a restart replays every command: let the queue drain
                self._producer.poll(0.05)


class _Pending:
    """Consumed offsets of one partition in order, each with its outputs still unacknowledged."""

    def __init__(self) -> None:
        self.queue: deque[list[int]] = deque()  # [offset, outstanding acks]
        self.committable: int | None = None

    def settle(self) -> None:
        while self.queue and self.queue[0][1] == 0:
            self.committable = self.queue.popleft()[0] + 1


class CommitAfterAck:
    """Tracks consumed records until their outputs are acknowledged and commits what is settled.

    Delivery callbacks run inside ``producer.poll``/``flush`` on the stage's own thread, so no lock is
    needed. A failed delivery is produced again (the idempotent producer and the hit ids make that safe);
    an output too large for any record is set aside instead (it would fail again for ever).
    """

    def __init__(self, consumer: Consumer, producer: Producer, stage: str) -> None:
        self.consumer = consumer
        self.producer = producer
        self.stage = stage
        self._partitions: dict[tuple[str, int], _Pending] = {}
        self._retry: list[tuple[Output, Callable[[], None] | None]] = []

    def send(self, output: Output, done: Callable[[], None] | None = None) -> None:
        def report(error: Any, _message: Any) -> None:
            if error is None:
                if done is not None:
                    done()
            elif error.code() == KafkaError.MSG_SIZE_TOO_LARGE:
                self._set_aside(output, error, done)
            else:
                log.warning("%s: delivery to %s failed (%s); producing again", self.stage, output.topic, error)
                metrics.DELIVERY_RETRIES.labels(self.stage).inc()
                self._retry.append((output, done))

        placed = {} if output.partition is None else {"partition": output.partition}
        while True:
            try:
                self.producer.produce(output.topic, output.value, output.key, on_delivery=report, **placed)
                return
            except BufferError:  # local queue full: serve acks until there is room (back-pressure)
                self.producer.poll(0.05)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.MSG_SIZE_TOO_LARGE:
                    raise
                self._set_aside(output, exc.args[0], done)
                return

    def _set_aside(self, output: Output, error: KafkaError, done: Callable[[], None] | None) -> None:
        """An output too large for any broker (a foreign record's huge field echoed into it), now or after a
        restart: set aside and counted, and taken as acknowledged, so its input is committed instead of failing
        the stage (or retrying) at every replay."""
        skip(self.stage, "output too large", output.topic,
             f"{len(output.key or b'') + len(output.value or b'')} bytes: {error.str()}")
        if done is not None:
            done()

    def track(self, message: Message, outputs: Sequence[Output]) -> None:
        """Produce the outputs of one consumed record; its offset becomes committable once all are acked."""
        pending = self._partitions.setdefault((message.topic(), message.partition()), _Pending())
        entry = [message.offset(), len(outputs)]
        pending.queue.append(entry)
        if not outputs:
            pending.settle()
            return
        started = time.monotonic()

        def one_acked() -> None:
            entry[1] -= 1
            if entry[1] == 0:
                metrics.LATENCY.labels(self.stage).observe(time.monotonic() - started)
                pending.settle()

        for output in outputs:
            self.send(output, one_acked)

    def serve(self, timeout: float = 0.0) -> None:
        """Deliver acknowledgements and re-produce failed outputs."""
        self.producer.poll(timeout)
        retry, self._retry = self._retry, []
        for output, done in retry:
            self.send(output, done)

    def commit(self, partitions: Iterable[tuple[str, int]] | None = None, asynchronous: bool = True) -> None:
        """Commit the settled offsets (of ``partitions``, default all tracked ones)."""
        keys = list(self._partitions) if partitions is None else [k for k in partitions if k in self._partitions]
        offsets = []
        for key in keys:
            pending = self._partitions[key]
            if pending.committable is not None:
                offsets.append(TopicPartition(key[0], key[1], pending.committable))
                pending.committable = None
        if offsets:
            try:
                self.consumer.commit(offsets=offsets, asynchronous=asynchronous)
            except KafkaException as exc:  # a rebalance under way: the records are replayed, ids are stable
                log.info("%s: commit failed (%s)", self.stage, exc)

    def drain(self, partitions: Iterable[tuple[str, int]] | None = None, timeout: float = 30.0) -> None:
        """Wait for every outstanding ack, commit synchronously, forget ``partitions`` (revoked)."""
        deadline = time.monotonic() + timeout
        while (self._retry or len(self.producer) > 0) and time.monotonic() < deadline:
            self.serve(0.05)
        keys = list(self._partitions) if partitions is None else list(partitions)
        self.commit(keys, asynchronous=False)
        for key in keys:
            self._partitions.pop(key, None)


@dataclass
class Stage:
    """One consumer-group stage: its inputs, its work, and the command logs it follows."""

    name: str
    group: str
    inputs: Sequence[str]
    handle: Handler
    commands: Sequence[tuple[CommandLog, Apply]] = ()
    tick: Callable[[], Sequence[Output]] | None = None
    """Called every loop: outputs not tied to one input record (e.g. a window closing by the clock)."""
    on_assign: Callable[[list[TopicPartition]], None] | None = None
    on_revoke: Callable[[list[TopicPartition]], None] | None = None


def run_stage(settings: Settings, stage: Stage, consumer: Consumer, producer: Producer,
              stop: threading.Event, ready: threading.Event | None = None) -> None:
    """Catch up on the commands, then consume ``stage.inputs`` until ``stop``; commits after the acks.

    While the site stands by (:meth:`Settings.standing_by`) the stage follows its commands only, out of its group: it
    subscribes when the site becomes active, and when the site stops being active it finishes what it consumed
    (outputs acknowledged, offsets committed) and leaves the group again."""
    for command_log, apply in stage.commands:
        command_log.catch_up(apply)
    tracker = CommitAfterAck(consumer, producer, stage.name)

    def assigned(_consumer: Any, partitions: list[TopicPartition]) -> None:
        log.info("%s: assigned %s", stage.name, [(p.topic, p.partition) for p in partitions])
        if stage.on_assign is not None:
            stage.on_assign(partitions)

    def revoked(_consumer: Any, partitions: list[TopicPartition]) -> None:
        tracker.drain([(p.topic, p.partition) for p in partitions])
        if stage.on_revoke is not None:
            stage.on_revoke(partitions)

    subscribed = not settings.standing_by()
    if subscribed:
        consumer.subscribe(list(stage.inputs), on_assign=assigned, on_revoke=revoked)
    metrics.ACTIVE.labels(stage.name).set(int(subscribed))
    if ready is not None:
        ready.set()
    next_commit = time.monotonic() + settings.commit_interval_s
    try:
        while not stop.is_set():
            for command_log, apply in stage.commands:
                command_log.poll(apply)
            if settings.standing_by():
                if subscribed:
                    log.info("%s: the site stands by: leaving group %s", stage.name, stage.group)
                    tracker.drain()
                    tracker.commit(asynchronous=False)
                    consumer.unsubscribe()
                    subscribed = False
                    metrics.ACTIVE.labels(stage.name).set(0)
                consumer.poll(STANDBY_POLL_S)  # serves the revocation; no assignment, no records
                continue
            if not subscribed:
                log.info("%s: the site is active: joining group %s", stage.name, stage.group)
                consumer.subscribe(list(stage.inputs), on_assign=assigned, on_revoke=revoked)
                subscribed = True
                metrics.ACTIVE.labels(stage.name).set(1)
            messages = [m for m in _next_batch(consumer, settings.batch) if _usable(stage.name, m)]
            if messages:
                for message, outputs in zip(messages, stage.handle(messages), strict=True):
                    tracker.track(message, outputs)
            if stage.tick is not None:
                for output in stage.tick():
                    tracker.send(output)
            tracker.serve(0)
            if time.monotonic() >= next_commit:
                tracker.commit()
                next_commit = time.monotonic() + settings.commit_interval_s
        tracker.drain()
    finally:
        consumer.close()
        producer.flush(10.0)
        for command_log, _apply in stage.commands:
            command_log.close()


Runner = Callable[[threading.Event, threading.Event], None]
"""A stage's run function bound to its settings: ``(stop, ready)``."""


def run_together(name: str, runners: Sequence[Runner], stop: threading.Event,
                 ready: threading.Event | None = None) -> None:
    """Sub-stages that make one stage (e.g. a repartition and its consumer), each in its own thread; ``ready``
    once all are. One failing stops the others and fails the whole (the service then exits)."""
    readies = [threading.Event() for _ in runners]
    failed: list[BaseException] = []

    def run(runner: Runner, own: threading.Event) -> None:
        try:
            runner(stop, own)
        except BaseException as exc:
            failed.append(exc)
            stop.set()

    threads = [threading.Thread(target=run, args=(r, e), name=f"{name}-{n}")
               for n, (r, e) in enumerate(zip(runners, readies, strict=True))]
    for thread in threads:
        thread.start()
    while not stop.is_set() and not all(e.is_set() for e in readies):
        time.sleep(0.05)
    if ready is not None and not stop.is_set():
        ready.set()
    for thread in threads:
        thread.join()
    if failed:
        raise RuntimeError(f"{name}: a sub-stage failed") from failed[0]


def _next_batch(consumer: Consumer, size: int) -> list[Message]:
    """What is already fetched (up to ``size``), else wait briefly for the first record: a batch never
    waits to fill up, so a lone capture is matched at once."""
    return consumer.consume(size, 0) or consumer.consume(1, 0.05) + consumer.consume(max(size - 1, 1), 0)


def _usable(stage: str, message: Message) -> bool:
    error = message.error()
    if error is None:
        return True
    if error.code() != KafkaError._PARTITION_EOF:
        log.warning("%s: %s", stage, error)
    return False
