"""The admin client's calls on partitions' offsets: look them up, and delete the records below one.

Java's `Admin.listOffsets` and `deleteRecords`, which kafka-get-offsets and kafka-delete-records are built on.
Both go to each partition's leader, one request per leader; a moved or unknown leader is retried for the
partitions it hit only.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from bus.client.admin.common import LEADER_ERRORS, AdminCalls, AdminError, Retry, error_name
from bus.protocol.topic_partition import TopicPartition

T = TypeVar("T")

LIST_OFFSETS, DELETE_RECORDS = 2, 21


class OffsetSpec:
    """ListOffsets targets: the special timestamps Kafka's protocol uses, or any epoch-ms timestamp."""

    EARLIEST = -2
    LATEST = -1
    MAX_TIMESTAMP = -3

    @staticmethod
    def for_timestamp(ms: int) -> int:
        return int(ms)


@dataclasses.dataclass(frozen=True, slots=True)
class ListOffsetsResultInfo:
    offset: int  # -1 when no record matches the timestamp
    timestamp: int
    leader_epoch: int | None


def _per_leader_call(admin: AdminCalls, partitions: Iterable[TopicPartition], api_key: int,
                     build: Callable[[dict[str, list[TopicPartition]], Any], Any], result: Callable[[Any], T],
                     what: str) -> dict[TopicPartition, T]:
    """One request per partition leader (its partitions grouped by topic): partition -> `result(answer)`.

    Leader errors (a moved or unknown leader) are retried for the partitions they hit only; any
    other error is raised.
    """
    wanted = list(partitions)
    out: dict[TopicPartition, T] = {}
    leader_errors = {int(e) for e in LEADER_ERRORS}

    def attempt() -> None:
        todo = [tp for tp in wanted if tp not in out]
        if not todo:
            return
        by_node: dict[int, list[TopicPartition]] = {}
        for tp, node in admin._leaders(todo).items():
            by_node.setdefault(node, []).append(tp)
        retry: AdminError | None = None
        for node, batch in by_node.items():
            by_topic: dict[str, list[TopicPartition]] = {}
            for tp in batch:
                by_topic.setdefault(tp.topic, []).append(tp)
            response = admin._send(node, api_key, functools.partial(build, by_topic))
            for topic in response.topics:
                for p in topic.partitions:
                    tp = TopicPartition(topic.name, int(p.partition_index))
                    code = int(p.error_code)
                    if code in leader_errors:
                        retry = AdminError(code)
                        continue
                    if code:
                        raise AdminError.of(code, f"{tp}: {error_name(code)}")
                    out[tp] = result(p)
        if retry is not None:
            raise Retry(retry)

    admin._call(attempt, what)
    return {tp: out[tp] for tp in wanted}


class OffsetAdmin:
    """The offset and record deletion calls `AdminClient` inherits."""

    def list_offsets(self: AdminCalls, specs: Mapping[TopicPartition, int], *,
                     isolation_level: str = "read_uncommitted") -> dict[TopicPartition, ListOffsetsResultInfo]:
        """Offsets by spec per partition: OffsetSpec.EARLIEST / LATEST / MAX_TIMESTAMP or a timestamp (ms).

        For a timestamp the answer is the first offset whose timestamp is at or after it, or offset -1
        when there is none (Kafka's UNKNOWN_OFFSET); read_committed stops LATEST at the LSO.
        """
        level = 1 if isolation_level.replace("-", "_") == "read_committed" else 0
        wanted = {TopicPartition(tp.topic, int(tp.partition)): int(spec) for tp, spec in specs.items()}

        def build(by_topic: dict[str, list[TopicPartition]], s: Any) -> Any:
            return s.make("ListOffsetsRequest", replica_id=-1, isolation_level=level, timeout=self._timeout_ms(None),
                          topics=[s.make("ListOffsetsTopic", name=topic, partitions=[
                              s.make("ListOffsetsPartition", partition_index=tp.partition, current_leader_epoch=-1,
                                     timestamp=wanted[tp]) for tp in tps])
                              for topic, tps in by_topic.items()])

        def result(p: Any) -> ListOffsetsResultInfo:
            offset = int(p.offset) if hasattr(p, "offset") else int((p.old_style_offsets or [-1])[0])
            epoch = int(getattr(p, "leader_epoch", -1))
            return ListOffsetsResultInfo(offset, int(getattr(p, "timestamp", -1)), None if epoch < 0 else epoch)

        return _per_leader_call(self, wanted, LIST_OFFSETS, build, result, "list offsets")

    def delete_records(self: AdminCalls, before: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Delete records below the given offsets (-1: the high watermark); returns the new low watermarks."""
        wanted = {TopicPartition(tp.topic, int(tp.partition)): int(offset) for tp, offset in before.items()}

        def build(by_topic: dict[str, list[TopicPartition]], s: Any) -> Any:
            return s.make("DeleteRecordsRequest", timeout=self._timeout_ms(None),
                          topics=[s.make("DeleteRecordsTopic", name=topic, partitions=[
                              s.make("DeleteRecordsPartition", partition_index=tp.partition, offset=wanted[tp])
                              for tp in tps]) for topic, tps in by_topic.items()])

        return _per_leader_call(self, wanted, DELETE_RECORDS, build, lambda p: int(p.low_watermark), "delete records")
