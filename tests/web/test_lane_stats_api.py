"""``/api/v1/stats`` grouped by lane against a real console and broker (issue 29 part 3).

A lane statistic is published like any other; one filtered to a checkpoint or lane the deployment map lacks, a lane
that is not a number, or lanes of face captures are 422s naming the field, and nothing is published. Results carry
their checkpoint and lane, and the answer names each checkpoint's lane count so the page can draw idle lanes.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer

from contracts.deployment_map import DeploymentMap
from tests.web.test_stats_api import RESULTS, STATS, result
from tests.web.test_watchlist_api import read_topic, wait_for


def published(bootstrap: str) -> int:
    """How many statistic commands the control topic holds: none before the first statistic makes the topic (this
    test may run first on its broker)."""
    try:
        return len(read_topic(bootstrap, STATS))
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError._UNKNOWN_PARTITION:
            raise
        return 0


def lanes_of(console: Any) -> dict[str, int]:
    return {c.checkpoint_id: c.lanes for c in DeploymentMap.load(console.map_path).checkpoints}


def fields(response: Any) -> list[str]:
    return [part for error in response.json()["detail"] for part in error["loc"]]


def test_a_lane_statistic_starts_and_its_results_name_checkpoint_and_lane(console) -> None:
    operator, viewer = console.client("operator"), console.client("viewer")
    lanes = lanes_of(console)
    checkpoint = max(lanes, key=lambda cp: (lanes[cp], cp))
    response = operator.post("/api/v1/stats", json={"measure": "vehicle_count", "group_by": "lane", "window_s": 60,
                                                    "filter": {"checkpoint_id": checkpoint}})
    assert response.status_code == 201, response.text
    stat_id = response.json()["stat_id"]
    assert response.json()["group_by"] == "lane"
    published = dict(read_topic(console.backing.broker.bootstrap, STATS))[stat_id]
    assert published["group_by"] == "lane" and published["filter"] == {"checkpoint_id": checkpoint}

    w0, w1 = "2026-03-02T09:00:00.000+08:00", "2026-03-02T09:01:00.000+08:00"
    producer = Producer({"bootstrap.servers": console.backing.broker.bootstrap})
    for lane, value in ((1, 4), (2, 9)):
        record = result(stat_id, w0, w1, f"{checkpoint}/lane-{lane}", value, True)
        producer.produce(RESULTS, json.dumps(record).encode(), key=stat_id.encode())
    assert producer.flush(10) == 0
    answer = wait_for(lambda: (a := viewer.get(f"/api/v1/stats/{stat_id}/results").json()) and
                      len(a["results"]) == 2 and a)
    assert [(r["group"], r["checkpoint_id"], r["lane"], r["value"]) for r in answer["results"]] == [
        (f"{checkpoint}/lane-1", checkpoint, 1, 4), (f"{checkpoint}/lane-2", checkpoint, 2, 9)]
    assert answer["lanes"] == {checkpoint: lanes[checkpoint]}, "the filtered checkpoint's lanes, idle ones included"

    # City-wide by lane: every checkpoint's lane count; another grouping: none, and results name no lane.
    city = operator.post("/api/v1/stats", json={"measure": "avg_speed", "group_by": "lane", "window_s": 30})
    assert city.status_code == 201, city.text
    assert viewer.get(f"/api/v1/stats/{city.json()['stat_id']}/results").json()["lanes"] == lanes
    district = operator.post("/api/v1/stats", json={"measure": "vehicle_count", "group_by": "district", "window_s": 30,
                                                    "filter": {"lane": 1}})
    assert district.status_code == 201, district.text
    assert viewer.get(f"/api/v1/stats/{district.json()['stat_id']}/results").json()["lanes"] is None
    for started in (stat_id, city.json()["stat_id"], district.json()["stat_id"]):
        assert operator.delete(f"/api/v1/stats/{started}").status_code == 200


@pytest.mark.parametrize(("body", "field"), [
    ({"measure": "face_count", "group_by": "lane", "window_s": 60}, "group_by"),
    ({"measure": "vehicle_count", "group_by": "lane", "window_s": 60, "filter": {"lane": "2"}}, "filter.lane"),
    ({"measure": "vehicle_count", "group_by": "lane", "window_s": 60, "filter": {"lane": 0}}, "filter.lane"),
    ({"measure": "vehicle_count", "group_by": "lane", "window_s": 60, "filter": {"lane": 99}}, "filter.lane"),
    ({"measure": "vehicle_count", "group_by": "lane", "window_s": 60, "filter": {"checkpoint_id": "999999#1#0#0"}},
     "filter.checkpoint_id"),
    ({"measure": "avg_speed", "group_by": "city", "window_s": 60, "filter": {"checkpoint_id": "gate-4"}},
     "filter.checkpoint_id"),
])
def test_bad_lane_statistics_are_422_naming_the_field(console, body: dict[str, Any], field: str) -> None:
    before = published(console.backing.broker.bootstrap)
    response = console.client("operator").post("/api/v1/stats", json=body)
    assert response.status_code == 422, response.text
    assert field in fields(response), response.text
    assert published(console.backing.broker.bootstrap) == before, "nothing published"


def test_a_lane_the_checkpoint_does_not_have_is_422(console) -> None:
    lanes = lanes_of(console)
    checkpoint = min(lanes, key=lambda cp: (lanes[cp], cp))
    assert any(n > lanes[checkpoint] for n in lanes.values()), "the test city has checkpoints of different widths"
    body = {"measure": "distinct_plates", "group_by": "lane", "window_s": 60,
            "filter": {"checkpoint_id": checkpoint, "lane": lanes[checkpoint] + 1}}
    response = console.client("operator").post("/api/v1/stats", json=body)
    assert response.status_code == 422 and fields(response) == ["body", "filter.lane"], response.text
    assert f"has lanes 1 to {lanes[checkpoint]}" in response.text
    console.audit(lambda entries: any(checkpoint in json.dumps(e) for e in entries), user="operator",
                  action="stat.start")


def test_without_a_map_a_place_cannot_be_judged_503_and_the_rest_still_starts(console) -> None:
    operator = console.client("operator")
    path = console.map_path
    saved = path.read_text()
    try:
        path.unlink()
        placed = operator.post("/api/v1/stats", json={"measure": "vehicle_count", "group_by": "lane", "window_s": 60,
                                                      "filter": {"lane": 1}})
        assert placed.status_code == 503 and placed.json()["backend"] == "map", placed.text
        bad = operator.post("/api/v1/stats", json={"measure": "face_count", "group_by": "lane", "window_s": 60})
        assert bad.status_code == 422 and "group_by" in fields(bad), "a bad shape is 422 with or without a map"
        whole = operator.post("/api/v1/stats", json={"measure": "vehicle_count", "group_by": "lane", "window_s": 60})
        assert whole.status_code == 201, whole.text
        assert console.client("viewer").get(f"/api/v1/stats/{whole.json()['stat_id']}/results").json()["lanes"] == {}
    finally:
        path.write_text(saved)
    assert operator.delete(f"/api/v1/stats/{whole.json()['stat_id']}").status_code == 200
