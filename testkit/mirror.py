"""The mirror's bus-side helpers, for its tests and benchmarks/dr_mirror.py: topic setup on either cluster, the
mirror's properties file (primary -> dr), and a topic's end offsets (the mirror itself runs as
`deploy.processes.mirror.MirrorProcess`)."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def create_topics(bootstrap: str, topics: dict[str, int], configs: dict[str, dict[str, str]] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(t, n, 1, config=(configs or {}).get(t, {})) for t, n in topics.items()])
    for future in futures.values():
        future.result(30)



def write_properties(path: Path, source: str, target: str, **extra: str) -> Path:
    lines = ["clusters = primary, dr", f"primary.bootstrap.servers = {source}", f"dr.bootstrap.servers = {target}",
             "primary->dr.enabled = true", "refresh.topics.interval.seconds = 1",
             "emit.checkpoints.interval.seconds = 1", "sync.group.offsets.interval.seconds = 1"]
    lines += [f"{k.replace('__', '->').replace('_', '.')} = {v}" for k, v in extra.items()]
    path.write_text("\n".join(lines) + "\n")
    return path



def end_offsets(bootstrap: str, topic: str, partitions: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "dr-test-watermarks"})
    try:
        return [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)]
    finally:
        consumer.close()
