"""Helpers of the statistics tests: commands, an independent tally, live traffic, and two instances
sharing the partitions."""

from __future__ import annotations

import ast
import json
import random
import re
import time
from collections import defaultdict
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from contracts.records import UNRECOGNIZED, encode, epoch_ms
from contracts.surveillance import lane_group
from contracts.topics import Topics
from deploy.processes.surveillance import ServiceProcess
from ingest import values
from testkit.surveillance import CHECKPOINTS, capture_time, face, vehicle

T = Topics()
GROUP_OF = {"lane": lambda r: lane_group(r["checkpoint_id"], r["lane"]), "checkpoint": lambda r: r["checkpoint_id"],
            "district": lambda r: r["checkpoint_id"].split("#")[0], "city": lambda _r: "city"}
"""A record's group under each grouping, computed here rather than by the service's code."""


def stat(stat_id: str, measure: str, group_by: str, window_s: int, **extra: Any) -> dict[str, Any]:
    return {"stat_id": stat_id, "measure": measure, "group_by": group_by, "window_s": window_s,
            "requested_by": "tester", "requested_at": capture_time(-600), **extra}


def tally(command: dict[str, Any], records: list[dict[str, Any]]) -> dict[tuple[str, int, str], Any]:
    """(stat id, window start ms, group) -> value, computed from scratch. An average is the exact mean: the service
    rounds its own to 2 decimals after summing in its own order (two instances merge partial sums), so at a .xx5
    boundary the two roundings can differ by 0.01 (CI); compared within 0.006, the service's rounding of the same
    mean always passes and a wrong mean fails."""
    size = command["window_s"] * 1000
    cells: dict[tuple[int, str], list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        if all(record.get(k) == v for k, v in command.get("filter", {}).items()):
            t = epoch_ms(record["capture_time"])
            cells[(t - t % size, GROUP_OF[command["group_by"]](record))].append(record)
    out = {}
    for (start, group), members in cells.items():
        value: Any = len(members)
        if command["measure"] == "distinct_plates":
            value = len({r["plate_number"] for r in members} - {UNRECOGNIZED})
        elif command["measure"] == "avg_speed":
            value = sum(r["speed_kmh"] for r in members) / len(members)
        out[(command["stat_id"], start, group)] = value
    return out


def finals(results: list[dict[str, Any]]) -> dict[tuple[str, int, str], list[Any]]:
    out: dict[tuple[str, int, str], list[Any]] = defaultdict(list)
    for r in results:
        if r["final"]:
            out[(r["stat_id"], epoch_ms(r["window_start"]), r["group"])].append(r["value"])
    return out


def live_traffic(bootstrap: str, rng: random.Random, seconds: float) -> tuple[list[dict], list[dict]]:
    """Cameras at work for ``seconds``: vehicles (plates from a small pool, so distinct counts differ from
    counts; some unreadable) and faces, each sent as it is captured (give or take half a second)."""
    pool = [values.plate(rng, "blue") for _ in range(30)]
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all", "log_level": 3})
    vehicles: list[dict] = []
    faces: list[dict] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for _ in range(6):
            n = len(vehicles)
            record = vehicle(f"sv{n}", rng.choice(CHECKPOINTS), rng.choice(pool), rng, capture_time(-rng.random() / 2))
            record["speed_kmh"] = round(rng.uniform(10, 90), 1)
            if rng.random() < 0.05:
                record["plate_number"] = UNRECOGNIZED
            vehicles.append(record)
            producer.produce(T.vehicle, encode(record), record["checkpoint_id"].encode())
            if n % 3 == 0:
                person = face(f"sf{n}", rng.choice(CHECKPOINTS), rng)
                faces.append(person)
                producer.produce(T.face, encode(person), person["checkpoint_id"].encode())
        producer.poll(0)
        time.sleep(0.05)
    assert producer.flush(30) == 0
    return vehicles, faces



def create_captures(bootstrap: str, partitions: int) -> None:
    """The capture topics with ``partitions`` each (the service creates only what is missing)."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    for future in admin.create_topics([NewTopic(t, partitions) for t in T.captures]).values():
        future.result(30)


def records_per_partition(bootstrap: str, topic: str, partitions: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "log_level": 3})
    try:
        return [high - low for low, high in (consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                                             for p in range(partitions))]
    finally:
        consumer.close()


ASSIGNED = re.compile(r"(\S+): assigned (\[.*\])")


def assignments(service: ServiceProcess, since: int = 0) -> dict[str, list[tuple[str, int]]]:
    """Each stage's latest assignment in this process's JSON log (from character ``since`` on)."""
    latest: dict[str, list[tuple[str, int]]] = {}
    for line in service.text()[since:].splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # a line cut by the read, or not a log line
        match = ASSIGNED.fullmatch(entry.get("message", "")) if entry.get("logger") == "surveillance.streams" else None
        if match:
            latest[match.group(1)] = ast.literal_eval(match.group(2))  # a list of (topic, partition) tuples
    return latest


def wait_split(services: list[ServiceProcess], stages: tuple[str, ...], partitions: int, since: list[int],
               timeout: float = 60.0) -> None:
    """Until every stage's partitions are split between ``services``: each holds some, none twice, none left."""
    deadline = time.monotonic() + timeout
    while True:
        latest = [assignments(s, at) for s, at in zip(services, since, strict=True)]
        split = True
        for stage in stages:
            held = [a.get(stage, []) for a in latest]
            together = [tp for h in held for tp in h]
            topics = {topic for topic, _p in together}
            split &= all(held) and len(together) == len(set(together)) == len(topics) * partitions
        if split:
            return
        assert time.monotonic() < deadline, f"partitions not split in {timeout} s: {latest}"
        time.sleep(0.3)


def rewind_group(bootstrap: str, group: str, topic: str, partitions: int) -> None:
    """Commit offset 0 of every partition for ``group`` (no member running): its next owner replays all."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         "log_level": 3})
    try:
        consumer.commit(offsets=[TopicPartition(topic, p, 0) for p in range(partitions)], asynchronous=False)
    except KafkaException as exc:
        raise AssertionError(f"cannot rewind {group}: {exc}") from exc
    finally:
        consumer.close()
