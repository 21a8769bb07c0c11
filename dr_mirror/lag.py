"""The mirror's lag as its Prometheus endpoint tells it (``dr_mirror.metrics``), per partition and as the RPO that
losing the primary now would cost: read by ``python -m dr_mirror status`` and by the console's DR page."""

from __future__ import annotations

import math
from typing import Any

from prometheus_client.parser import text_string_to_metric_families


def parse_lag(text: str) -> list[dict[str, Any]]:
    """Per partition: lag in records and in seconds (None while unknown) and whether an error stopped it, from the
    mirror's exposition text."""
    lag: dict[tuple[str, int], float] = {}
    seconds: dict[tuple[str, int], float] = {}
    stopped: dict[tuple[str, int], bool] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if "topic" not in sample.labels or "partition" not in sample.labels:
                continue
            key = (sample.labels["topic"], int(sample.labels["partition"]))
            if sample.name == "dr_mirror_partition_lag_records":
                lag[key] = sample.value
            elif sample.name == "dr_mirror_partition_lag_seconds" and math.isfinite(sample.value):
                seconds[key] = round(sample.value, 3)
            elif sample.name == "dr_mirror_partition_stopped":
                stopped[key] = sample.value > 0
    return [{"topic": t, "partition": p, "lag": int(lag[(t, p)]), "lag_seconds": seconds.get((t, p)),
             "stopped": stopped.get((t, p), False)} for t, p in sorted(lag)]


def rpo_now(partitions: list[dict[str, Any]]) -> dict[str, Any]:
    """What losing the primary now would cost: the records not yet at the DR site and the span of writes they cover
    (the oldest partition's lag in seconds; None when a lagging partition's age is unknown)."""
    waiting = [p for p in partitions if p["lag"] > 0]
    ages = [p["lag_seconds"] for p in waiting]
    return {"records": sum(p["lag"] for p in waiting),
            "seconds": None if None in ages else max(ages, default=0.0)}


def per_topic(partitions: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per topic: records waiting (summed over its partitions) and their age (the oldest partition's; None when one
    lagging partition's age is unknown)."""
    topics: dict[str, list[dict[str, Any]]] = {}
    for partition in partitions:
        topics.setdefault(partition["topic"], []).append(partition)
    return {topic: rpo_now(rows) for topic, rows in sorted(topics.items())}
