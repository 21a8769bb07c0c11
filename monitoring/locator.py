"""Where a device is: the deployment map, re-read when the file changes.

A device the map does not know is still monitored and alerted on, with district and crossroad
``"unknown"`` and the recogniser its heartbeats name.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from contracts.deployment_map import DeploymentMap, MapError

log = logging.getLogger(__name__)
UNKNOWN = "unknown"


@dataclass(frozen=True)
class Location:
    device_ip: str
    checkpoint_id: str
    recognizer_ip: str
    kind: str
    district: str
    crossroad: str
    direction: str
    lat: float | None
    lon: float | None
    known: bool

    def describe(self) -> str:
        if not self.known:
            return f"device {self.device_ip} (not in the deployment map)"
        return f"district {self.district}, crossroad {self.crossroad}, facing {self.direction} ({self.checkpoint_id})"


class Locator:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._mtime: float | None = None
        self._devices: dict[str, Location] = {}

    def refresh(self) -> None:
        """Reload if the file changed; a missing or broken map keeps the last good one (and says so once)."""
        try:
            mtime = self.path.stat().st_mtime
        except OSError:
            if self._mtime is not None or not self._devices:
                log.warning("deployment map %s not found: devices are located as unknown", self.path)
            self._mtime = None
            return
        if mtime == self._mtime:
            return
        try:
            deployment = DeploymentMap.load(self.path)
        except MapError as exc:
            log.warning("%s", exc)
            return
        self._mtime = mtime
        checkpoints = {c.checkpoint_id: c for c in deployment.checkpoints}
        devices = {}
        for d in deployment.devices:
            c = checkpoints.get(d.checkpoint_id)
            devices[d.device_ip] = Location(
                d.device_ip, d.checkpoint_id, d.recognizer_ip, d.kind, c.district if c else UNKNOWN,
                str(c.crossroad) if c else UNKNOWN, c.direction if c else UNKNOWN, c.lat if c else None,
                c.lon if c else None, c is not None)
        self._devices = devices

    def devices(self) -> dict[str, Location]:
        return dict(self._devices)

    def locate(self, device_ip: str, recognizer_ip: str = "", checkpoint_id: str = "") -> Location:
        known = self._devices.get(device_ip)
        if known is not None:
            return known
        return Location(device_ip, checkpoint_id or UNKNOWN, recognizer_ip or UNKNOWN, UNKNOWN, UNKNOWN, UNKNOWN,
                        UNKNOWN, None, None, False)
