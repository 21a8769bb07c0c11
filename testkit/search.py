"""The vehicle search (``GET /api/v1/captures/vehicles``) as its tests and benchmarks/search.py check it: `every_page`
follows a search's cursor to its end, `brute` finds the same answer by a full scan of the records written."""

from __future__ import annotations

import re
from typing import Any

import httpx

from contracts.records import epoch_ms
from contracts.tables import captures as layout

REASON = "case 2026-0029"
URL = "/api/v1/captures/vehicles"
Record = dict[str, Any]


def every_page(client: httpx.Client, params: dict[str, Any]) -> list[dict[str, Any]]:
    """Each page's body, following ``next`` to the end."""
    bodies, cursor = [], None
    while True:
        response = client.get(URL, params={**params, "reason": REASON, **({"cursor": cursor} if cursor else {})})
        assert response.status_code == 200, response.text
        body = response.json()
        assert len(body["items"]) <= int(params.get("limit", 50))
        bodies.append(body)
        cursor = body["next"]
        if cursor is None:
            return bodies



def brute(records: list[Record], params: dict[str, Any]) -> list[str]:
    """The record ids a full scan of ``records`` (newest first) finds for ``params``, in that order."""
    start, end = epoch_ms(params["from"]), epoch_ms(params["to"])
    plate = params.get("plate")
    pattern = re.compile(plate.replace("*", ".*").replace("?", ".")) if plate else None
    fields = {"checkpoint": "checkpoint_id", "lane": "lane", "plate_color": "plate_color",
              "vehicle_color": "vehicle_color", "vehicle_type": "vehicle_type", "brand": "vehicle_brand"}

    def hit(r: Record) -> bool:
        return (start <= r["_ms"] < end
                and all(r[field] == params[name] for name, field in fields.items() if name in params)
                and ("district" not in params or layout.district_of(r["checkpoint_id"]) == params["district"])
                and ("direction" not in params or layout.direction_of(r["checkpoint_id"]) == params["direction"])
                and (pattern is None or pattern.fullmatch(r["plate_number"]) is not None))

    return [r["record_id"] for r in records if hit(r)]
