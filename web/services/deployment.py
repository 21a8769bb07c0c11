"""The deployment map as the console serves it: loaded from ``[map] path``, reloaded when the file changes.

The simulator (or an asset-register export) rewrites the map atomically while the console runs, so
the store compares the file's modification time and size on each use (a ``stat``, microseconds)
and parses it again only when they changed. Lookups by checkpoint and device are dicts built once
per load, which is what keeps adding a location to every search result cheap.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contracts.deployment_map import Checkpoint, DeploymentMap, Device, MapError


@dataclass(frozen=True)
class Loaded:
    """One parsed version of the map file and its indexes."""

    stamp: tuple[int, int]
    map: DeploymentMap
    checkpoints: dict[str, Checkpoint]
    devices: dict[str, Device]
    districts: dict[str, str]
    """District code -> name."""


class MapStore:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._loaded: Loaded | None = None

    def current(self) -> Loaded:
        """The map as the file now says; MapError when it is missing or malformed."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            raise MapError(f"deployment map not found: {self.path}") from None
        except OSError as exc:
            raise MapError(f"cannot read deployment map {self.path}: {exc}") from None
        stamp = (st.st_mtime_ns, st.st_size)
        loaded = self._loaded
        if loaded is not None and loaded.stamp == stamp:
            return loaded
        with self._lock:
            if self._loaded is None or self._loaded.stamp != stamp:
                parsed = DeploymentMap.load(self.path)
                self._loaded = Loaded(stamp, parsed, {c.checkpoint_id: c for c in parsed.checkpoints},
                                      {d.device_ip: d for d in parsed.devices},
                                      {d.code: d.name for d in parsed.districts})
            return self._loaded

    def locate(self, checkpoint_id: str) -> dict[str, Any] | None:
        """Where a checkpoint is, for a search result; None when the map is missing or does not know it.

        A search still answers without the map: its rows come from HBase, the location is an extra.
        """
        try:
            loaded = self.current()
        except MapError:
            return None
        return location(loaded, checkpoint_id)


def location(loaded: Loaded, checkpoint_id: str) -> dict[str, Any] | None:
    checkpoint = loaded.checkpoints.get(checkpoint_id)
    if checkpoint is None:
        return None
    return {"district": checkpoint.district, "district_name": loaded.districts.get(checkpoint.district),
            "crossroad": checkpoint.crossroad, "direction": checkpoint.direction,
            "lat": checkpoint.lat, "lon": checkpoint.lon}


def devices(loaded: Loaded, checkpoint_id: str | None = None) -> list[dict[str, Any]]:
    """Cameras (all, or those of one checkpoint) with their checkpoint's location, by checkpoint then kind."""
    chosen = [d for d in loaded.devices.values() if checkpoint_id is None or d.checkpoint_id == checkpoint_id]
    return [{"device_ip": d.device_ip, "kind": d.kind, "checkpoint_id": d.checkpoint_id,
             "recognizer_ip": d.recognizer_ip, "location": location(loaded, d.checkpoint_id)}
            for d in sorted(chosen, key=lambda d: (d.checkpoint_id, d.kind, d.device_ip))]
