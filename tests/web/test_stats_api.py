"""``/api/v1/stats`` against a real console and broker: commands on ``control.stats``, results folded from
``surveillance.stats`` (records in the contract's result shape, produced with confluent-kafka).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from confluent_kafka import Producer

from tests.web.test_watchlist_api import read_topic, wait_for

STATS = "control.stats"
RESULTS = "surveillance.stats"


def result(stat_id: str, start: str, end: str, group: str, value: float, final: bool) -> dict[str, Any]:
    return {"stat_id": stat_id, "window_start": start, "window_end": end, "group": group, "value": value,
            "final": final}


def test_start_results_and_stop(console) -> None:
    operator, viewer = console.client("operator"), console.client("viewer")
    assert viewer.post("/api/v1/stats", json={"measure": "vehicle_count", "group_by": "city",
                                              "window_s": 60}).status_code == 403
    response = operator.post("/api/v1/stats", json={"measure": "vehicle_count", "group_by": "district", "window_s": 60,
                                                    "filter": {"vehicle_type": "SUV"}})
    assert response.status_code == 201, response.text
    stat = response.json()
    stat_id = stat["stat_id"]
    assert stat["status"] == "pending" and stat["filter"] == {"vehicle_type": "SUV"}
    published = dict(read_topic(console.backing.broker.bootstrap, STATS))[stat_id]
    assert published["measure"] == "vehicle_count" and published["window_s"] == 60
    assert [s["stat_id"] for s in viewer.get("/api/v1/stats").json()].count(stat_id) == 1

    w0, w1, w2 = "2026-03-02T09:00:00.000+08:00", "2026-03-02T09:01:00.000+08:00", "2026-03-02T09:02:00.000+08:00"
    producer = Producer({"bootstrap.servers": console.backing.broker.bootstrap})
    for value in (result(stat_id, w0, w1, "330102", 3, False), result(stat_id, w0, w1, "330102", 5, True),
                  result(stat_id, w0, w1, "330102", 4, False),  # a late partial never replaces the final
                  result(stat_id, w1, w2, "330102", 2, False), result(stat_id, w0, w1, "330106", 7, True),
                  result("stat-unknown", w0, w1, "city", 1, True)):
        producer.produce(RESULTS, json.dumps(value).encode(), key=value["stat_id"].encode())
    assert producer.flush(10) == 0

    def folded() -> list[dict[str, Any]] | None:
        answer = viewer.get(f"/api/v1/stats/{stat_id}/results").json()["results"]
        return answer if len(answer) == 3 and answer[-1]["value"] == 2 else None

    results = wait_for(folded)
    assert [(r["window_start"], r["group"], r["value"], r["final"]) for r in results] == [
        (w0, "330102", 5, True), (w0, "330106", 7, True), (w1, "330102", 2, False)]
    assert viewer.get("/api/v1/stats/stat-unknown/results").status_code == 404

    assert operator.delete(f"/api/v1/stats/{stat_id}").status_code == 200
    assert read_topic(console.backing.broker.bootstrap, STATS)[-1] == (stat_id, None)
    assert stat_id not in [s["stat_id"] for s in viewer.get("/api/v1/stats").json()]
    assert viewer.get(f"/api/v1/stats/{stat_id}/results").status_code == 404
    console.audit(user="operator", action="stat.start")
    console.audit(action="stat.stop", q=stat_id)


@pytest.mark.parametrize(("body", "field"), [
    ({"measure": "bicycles", "group_by": "city", "window_s": 60}, "measure"),
    ({"measure": "face_count", "group_by": "street", "window_s": 60}, "group_by"),
    ({"measure": "face_count", "group_by": "city", "window_s": 0}, "window_s"),
    ({"measure": "face_count", "group_by": "city", "window_s": 10 ** 6}, "window_s"),
    ({"measure": "vehicle_count", "group_by": "city", "window_s": 60, "filter": {"wings": 2}}, "filter"),
    ({"measure": "vehicle_count", "group_by": "city"}, "window_s"),
])
def test_bad_statistics_are_422_naming_the_field(console, body: dict[str, Any], field: str) -> None:
    response = console.client("operator").post("/api/v1/stats", json=body)
    assert response.status_code == 422, response.text
    assert field in [part for error in response.json()["detail"] for part in error["loc"]], response.text
