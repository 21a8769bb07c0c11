"""How far a consumer group is behind: log end offset minus committed offset, over every partition the
group has committed (as ``kafka-consumer-groups.sh --describe`` shows it), not only the monitor's own
inputs, so a rule can watch any group (the ingest's, the surveillance service's, the monitor's)."""

from __future__ import annotations

import logging

from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from ingest.producer import BusSettings, librdkafka_settings

log = logging.getLogger(__name__)


class GroupLag:
    """One AdminClient for every lag question of the monitor's rules (OffsetFetch, then ListOffsets)."""

    def __init__(self, bus: BusSettings, timeout_s: float = 5.0) -> None:
        """``bus``: the monitor's client settings (:func:`contracts.bus_client.librdkafka`), or just where a
        PLAINTEXT bus is."""
        self.admin = AdminClient({**librdkafka_settings(bus), "log_level": 3})
        self.timeout_s = timeout_s

    def __call__(self, group: str) -> int | None:
        """Records ``group`` is behind; None when unknown (bus unreachable, or the group never committed),
        so the rule neither fires nor resolves on a guess."""
        try:
            answer = self.admin.list_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(group)], request_timeout=self.timeout_s)[group].result(self.timeout_s)
            committed = {(tp.topic, tp.partition): tp.offset for tp in answer.topic_partitions or [] if tp.offset >= 0}
            if not committed:
                return None
            futures = self.admin.list_offsets({TopicPartition(t, p): OffsetSpec.latest() for t, p in committed},
                                              request_timeout=self.timeout_s)
            ends = {(tp.topic, tp.partition): future.result(self.timeout_s).offset for tp, future in futures.items()}
        except Exception as exc:  # lag unknown this time; the rule does not fire on unknowns
            log.warning("consumer lag of %s: %s", group, exc)
            return None
        return sum(max(0, ends[tp] - offset) for tp, offset in committed.items() if ends.get(tp, -1) >= 0)
