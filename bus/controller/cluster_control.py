"""Cluster membership (Kafka's ClusterControlManager and BrokerHeartbeatManager): registration, sessions, fencing.

Brokers register (BrokerRegistration) and then heartbeat (BrokerHeartbeat) to the active controller; one whose
session (`broker.session.timeout.ms`) expires is fenced by a committed record and unfenced by its next heartbeat,
as Kafka's BrokerHeartbeatManager does. Sessions are the active controller's memory only: a new active controller
gives every registered broker a fresh session. Fenced brokers are left out of Metadata and of new placements.
A broker fenced or shutting down hands its leaderships and ISR seats on (`leave`, from replication control), one
that is back takes the leaderless partitions it may lead (`elect_leaderless`), in the same entry.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from kio.schema.errors import ErrorCode

from bus.controller.control_context import ControlContext
from bus.controller.errors import ControllerError
from bus.controller.image import broker_record
from bus.controller.metadata_log.record_log import MetadataRecord

log = logging.getLogger(__name__)


class ClusterControlManager:
    def __init__(self, context: ControlContext, broker_session_timeout_ms: int,
                 leave: Callable[[set[int]], list[MetadataRecord]],
                 elect_leaderless: Callable[[int], list[MetadataRecord]]) -> None:
        """`leave` and `elect_leaderless`: the partition changes when brokers go and when one is back
        (`ReplicationControlManager.leave` and `.elect_leaderless`)."""
        self._context = context
        self.broker_session_timeout_s = broker_session_timeout_ms / 1000.0
        self._leave = leave
        self._elect_leaderless = elect_leaderless
        self._sessions: dict[int, float] = {}  # broker id -> monotonic expiry, on the active controller

    def reset_sessions(self, active: bool) -> None:
        """A new active controller gives every registered broker a fresh session; one that is not keeps none."""
        expiry = time.monotonic() + self.broker_session_timeout_s
        self._sessions = dict.fromkeys(self._context.image.brokers, expiry) if active else {}

    def register_broker(self, broker_id: int, endpoints: list[tuple[str, str, int]], rack: str | None,
                        incarnation_id: str | None = None) -> None:
        """Record where a broker serves clients (Kafka's BrokerRegistration): Metadata lists it, topics use it.

        Another incarnation (a new process) of a broker whose session still lives is refused with
        DUPLICATE_BROKER_REGISTRATION, as Kafka's ClusterControlManager does: the old one is fenced when its
        session expires, which moves its leaderships and ISR seats to replicas that have the data, and only then
        may the new one register. A broker restarted with an empty disk would otherwise go on leading its
        partitions with an empty log, and its followers would truncate acknowledged records to match it. Its own
        node's registration is the exception: the controller runs in that process, so the old one is gone."""
        self._context.check_active()
        registered = self._context.working.brokers.get(broker_id)
        if (registered is not None and broker_id != self._context.node_id and incarnation_id is not None
                and registered.incarnation_id not in (None, incarnation_id) and not registered.fenced):
            if self._sessions.get(broker_id, 0.0) > time.monotonic():
                raise ControllerError(ErrorCode.duplicate_broker_registration,
                                      "Another broker is registered with that broker id.")
            # Its session has expired but the periodic fencing has not run yet: fence the old one first.
            self._fence({broker_id})
            registered = self._context.working.brokers.get(broker_id)
        if (registered is None or registered.endpoints != tuple(endpoints) or registered.rack != rack
                or registered.fenced or registered.in_controlled_shutdown
                or registered.incarnation_id != incarnation_id):
            self._context.commit([broker_record(broker_id, endpoints, rack, incarnation_id),
                                  *self._elect_leaderless(broker_id)])
        self._sessions[broker_id] = time.monotonic() + self.broker_session_timeout_s

    def broker_heartbeat(self, broker_id: int, want_shut_down: bool = False) -> bool:
        """Renew a registered broker's session, unfencing it if it was fenced; returns whether it may shut down.

        `want_shut_down` (controlled shutdown, Kafka's BrokerHeartbeatManager): the first such heartbeat marks the
        broker shutting down and moves its leaderships and ISR memberships to other brokers, as fencing does; a
        later one, once it leads nothing, fences it and answers True. A broker that leads nothing is fenced by the
        first one (Kafka's SHUTDOWN_NOW when it has no leaderships). Registering again ends the state.
        """
        self._context.check_active()
        registered = self._context.working.brokers.get(broker_id)
        if registered is None:
            raise ControllerError(ErrorCode.broker_id_not_registered, f"Broker {broker_id} is not registered.")
        self._sessions[broker_id] = time.monotonic() + self.broker_session_timeout_s
        if want_shut_down:
            return self._controlled_shutdown(broker_id)
        if registered.fenced and not registered.in_controlled_shutdown:
            self._context.commit([{"type": "broker_fence", "id": broker_id, "fenced": False},
                                  *self._elect_leaderless(broker_id)])
        return False

    def _controlled_shutdown(self, broker_id: int) -> bool:
        working = self._context.working
        registered = working.brokers[broker_id]
        if registered.fenced:
            return True
        if not registered.in_controlled_shutdown:
            leads = any(state.leader == broker_id
                        for topic in working.topics.values() for state in topic.partitions.values())
            log.info("broker %d is shutting down: %s", broker_id,
                     "moving its leaderships away" if leads else "it leads nothing, fenced now")
            fence: list[MetadataRecord] = [] if leads else [{"type": "broker_fence", "id": broker_id, "fenced": True}]
            self._context.commit([{"type": "broker_shutdown", "id": broker_id}, *self._leave({broker_id}), *fence])
            return not leads
        # It has led nothing since the previous heartbeat (it cannot be elected): the new leaders took over.
        self._context.commit([{"type": "broker_fence", "id": broker_id, "fenced": True}])
        return True

    def fence_expired_brokers(self) -> None:
        """Fence every unfenced broker whose session expired, moving its leaderships and ISR memberships to the
        others (every node runs it periodically; only the active controller acts)."""
        if not self._context.active:
            return
        now = time.monotonic()
        expired = [broker_id for broker_id, registration in self._context.working.brokers.items()
                   if not registration.fenced and broker_id != self._context.node_id
                   and self._sessions.get(broker_id, now) < now]
        if expired:
            self._fence(set(expired))

    def _fence(self, expired: set[int]) -> None:
        """Fence brokers whose session expired, moving their leaderships and ISR memberships to the others."""
        for broker_id in sorted(expired):
            log.info("fencing broker %d: no heartbeat for %.1f s", broker_id, self.broker_session_timeout_s)
        self._context.commit([*self._leave(expired),
                              *({"type": "broker_fence", "id": broker_id, "fenced": True}
                                for broker_id in sorted(expired))])
