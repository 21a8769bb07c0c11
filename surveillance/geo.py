"""Where checkpoints are and how far apart: what the cloned-plate detector and statistics look up.

The deployment map gives every checkpoint's latitude, longitude and district; a clone judgement
needs the great-circle distance between two checkpoints (haversine on a spherical Earth: the error
against the ellipsoid is below 0.5 %, far inside the margin a speed limit of 200 km/h leaves), and
a statistic grouped by district needs the checkpoint's district. Distances are cached per pair:
a city has hundreds of checkpoints, a busy minute tens of thousands of sightings.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from contracts.deployment_map import Checkpoint, DeploymentMap, haversine_km


def district_of(checkpoint_id: str) -> str:
    """The district code a checkpoint id starts with (``district#crossroad#direction#index``)."""
    return checkpoint_id.split("#", 1)[0]


class Geo:
    """Checkpoint lookups over one deployment map."""

    def __init__(self, deployment_map: DeploymentMap) -> None:
        self.checkpoints: dict[str, Checkpoint] = {c.checkpoint_id: c for c in deployment_map.checkpoints}
        self.distance_km = lru_cache(maxsize=65536)(self._distance_km)

    def _distance_km(self, a: str, b: str) -> float | None:
        """Distance between two checkpoints, or None when either is not on the map (nothing to judge)."""
        first, second = self.checkpoints.get(a), self.checkpoints.get(b)
        if first is None or second is None:
            return None
        return haversine_km(first.lat, first.lon, second.lat, second.lon)

    def district(self, checkpoint_id: str) -> str:
        """The map's district, else the id's own prefix (a checkpoint added after the map was written)."""
        checkpoint = self.checkpoints.get(checkpoint_id)
        return checkpoint.district if checkpoint is not None else district_of(checkpoint_id)

    def location(self, checkpoint_id: str) -> dict[str, Any]:
        """The hit record's ``location``: district, crossroad, lat, lon (None where the map does not know)."""
        checkpoint = self.checkpoints.get(checkpoint_id)
        if checkpoint is None:
            return {"district": district_of(checkpoint_id), "crossroad": None, "lat": None, "lon": None}
        return {"district": checkpoint.district, "crossroad": checkpoint.crossroad,
                "lat": checkpoint.lat, "lon": checkpoint.lon}

    def diameter_km(self) -> float:
        """The largest distance between two checkpoints: over it / speed limit, no pair can be a clone."""
        points = list(self.checkpoints.values())
        return max((haversine_km(a.lat, a.lon, b.lat, b.lon) for i, a in enumerate(points) for b in points[i + 1:]),
                   default=0.0)
