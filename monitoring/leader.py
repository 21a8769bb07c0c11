"""One active monitor at a time: a lock held as the ownership of a one-partition topic in a consumer group.

The monitor keeps alert state in one process, so two instances evaluating would notify everything
twice. Every instance joins the group ``<group_id>.leader`` on the one-partition topic ``<group_id>.lock``;
Kafka's group protocol gives that partition to exactly one live member, and that member is the active
monitor; the cooperative-sticky assignor leaves it there when standbys join. The others wait as
standbys (logged, and ``monitor_active 0`` on their ``/metrics``) without consuming the inputs or
evaluating anything. When the active dies (even kill -9), the broker expires
its session after ``lock_session_s`` and hands the partition to a standby, which then loads the alert
book and the notification log from HBase like a restarted monitor: what was already delivered is not
sent again.

Fencing: an active that loses the partition (revoked) stops at once without flushing, so it cannot
overwrite the new active's state. A process frozen for longer than half the session (SIGSTOP, a long
GC-like stall) cannot know yet whether its session expired meanwhile; it treats the gap as a lost lock
and stops the same way rather than evaluate on a lock it may no longer hold.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from . import metrics

log = logging.getLogger(__name__)


class LostLeadership(RuntimeError):
    """This instance no longer holds the lock (revoked, or frozen for longer than it can vouch for)."""


class Leadership:
    def __init__(self, bus: Mapping[str, str], group_id: str, session_s: float, ensure_topic: Any) -> None:
        """``bus``: the monitor's client settings (:func:`contracts.bus_client.librdkafka`)."""
        self.topic = f"{group_id}.lock"
        self.group = f"{group_id}.leader"
        self.session_s = session_s
        ensure_topic({self.topic: 1})
        self._consumer = Consumer({
            **bus, "group.id": self.group, "enable.auto.commit": False,
            "session.timeout.ms": int(session_s * 1000), "heartbeat.interval.ms": max(100, int(session_s * 1000 / 6)),
            "client.id": "monitor-lock", "log_level": 3, "topic.metadata.refresh.interval.ms": 2000,
            # Sticky and incremental: a standby joining must not take the partition from a live active
            # (an eager rebalance revokes everything and may hand it to the newcomer).
            "partition.assignment.strategy": "cooperative-sticky"})
        self._held = False
        self._lost = False
        self._closing = False
        self._checked = time.monotonic()
        self._lock = threading.Lock()
        metrics.ACTIVE.set(0)
        self._consumer.subscribe([self.topic], on_assign=self._assigned, on_revoke=self._revoked)

    def _assigned(self, _consumer: Any, partitions: list[TopicPartition]) -> None:
        if partitions and not self._held:
            self._held = True
            self._checked = time.monotonic()
            metrics.ACTIVE.set(1)
            log.info("this monitor holds the lock (%s in group %s): active", self.topic, self.group)

    def _revoked(self, _consumer: Any, partitions: list[TopicPartition]) -> None:
        if self._held and partitions:
            self._held = False
            metrics.ACTIVE.set(0)
            if self._closing:  # left on purpose (stopping, or standing down): nobody took it
                log.info("this monitor left the lock (%s in group %s)", self.topic, self.group)
                return
            self._lost = True
            log.error("lock %s revoked: another monitor took over; this one stops without writing", self.topic)

    def acquire(self, stopping: threading.Event) -> bool:
        """Wait as a standby until this instance holds the lock (True) or ``stopping`` is set (False); once
        held, a watcher thread keeps serving the group and watching for freezes."""
        said = False
        waiting_since = time.monotonic()
        while not stopping.is_set():
            self._consumer.poll(0.2)
            if self._held:
                self._checked = time.monotonic()
                threading.Thread(target=self._watch, args=(stopping,), name="monitor-lock", daemon=True).start()
                return True
            if not said and time.monotonic() - waiting_since > self.session_s:
                log.warning("standby: another monitor holds the lock (%s in group %s); taking over when it goes",
                            self.topic, self.group)
                said = True
        return False

    def _watch(self, stopping: threading.Event) -> None:
        """Every 0.25 s: serve the group's callbacks (revocation) and notice a freeze of the whole process
        (no tick for over half the session). Its own thread, so a slow HBase flush is no freeze."""
        tick = min(0.25, self.session_s / 8)
        while not stopping.is_set() and not self._lost:
            now = time.monotonic()
            with self._lock:
                frozen, self._checked = now - self._checked, now
            if frozen > self.session_s / 2 and self._held:
                self._held, self._lost = False, True
                metrics.ACTIVE.set(0)
                log.error("this monitor was frozen %.1f s (> half the %.0f s lock session): another may have taken "
                          "over; stopping without writing", frozen, self.session_s)
                return
            with self._lock:
                self._consumer.poll(0)
            stopping.wait(tick)

    def check(self) -> None:
        """Called from the consume loop: raises :class:`LostLeadership` once the lock is lost."""
        if self._lost:
            raise LostLeadership(self.topic)

    def vouch(self) -> bool:
        """For the evaluation thread: True while the lock is held and the watcher ticked lately."""
        with self._lock:
            recent = time.monotonic() - self._checked <= self.session_s / 2
        return self._held and not self._lost and recent

    def close(self) -> None:
        """Leave the group at once (a standby takes over without waiting for the session to expire)."""
        self._closing = True
        with self._lock:
            self._consumer.close()
        metrics.ACTIVE.set(0)
