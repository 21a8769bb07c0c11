"""A deterministic city: districts, crossroads, checkpoints, capture devices and recognisers.

The deployment map is what the operator console draws and what routes and device failures are
planned on; the same seed and checkpoint count always give the same city, so a run can be
reproduced and its map saved as JSON beside it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

from contracts.deployment_map import Checkpoint, DeploymentMap, Device, District, Recognizer

# Administrative codes and names of the districts (a Hangzhou-like city: plates 浙A).
DISTRICTS = (
    ("330102", "Shangcheng"),
    ("330105", "Gongshu"),
    ("330106", "Xihu"),
    ("330108", "Binjiang"),
    ("330109", "Xiaoshan"),
    ("330110", "Yuhang"),
)
DIRECTIONS = ("N", "E", "S", "W")


@dataclass(frozen=True)
class City:
    seed: int
    checkpoints: tuple[Checkpoint, ...]
    devices: dict[str, Device]
    recognizers: tuple[Recognizer, ...]
    crossroads: dict[str, list[int]] = field(default_factory=dict)
    """Per district, the crossroad numbers in use (routes walk between neighbours)."""

    def deployment_map(self) -> DeploymentMap:
        return DeploymentMap(tuple(District(code, name) for code, name in DISTRICTS), self.checkpoints,
                             tuple(self.devices.values()), self.recognizers)

    def save(self, path: Path) -> None:
        """The deployment map, plus the seed that rebuilds this city."""
        self.deployment_map().save(path, extra={"seed": self.seed})

    def checkpoints_at(self, district: str, crossroad: int) -> list[Checkpoint]:
        return [c for c in self.checkpoints if c.district == district and c.crossroad == crossroad]


DEVICES_PER_RECOGNIZER = 8


def build_city(seed: int, n_checkpoints: int) -> City:
    """Lay out ``n_checkpoints`` checkpoints over the districts: 4 directions per crossroad at most."""
    if n_checkpoints < 1:
        raise ValueError("a city needs at least one checkpoint")
    rng = random.Random(f"city-{seed}")
    checkpoints: list[Checkpoint] = []
    crossroads: dict[str, list[int]] = {}
    for i in range(n_checkpoints):
        d_index = i % len(DISTRICTS)
        district = DISTRICTS[d_index][0]
        nth_in_district = i // len(DISTRICTS)
        crossroad = nth_in_district // len(DIRECTIONS) + 1
        direction_index = nth_in_district % len(DIRECTIONS)
        crossroads.setdefault(district, [])
        if crossroad not in crossroads[district]:
            crossroads[district].append(crossroad)
        vehicle_ip = f"10.{d_index + 1}.{crossroad}.{direction_index * 2 + 1}"
        face_ip = f"10.{d_index + 1}.{crossroad}.{direction_index * 2 + 2}" if rng.random() < 0.6 else None
        checkpoints.append(Checkpoint(
            checkpoint_id=f"{district}#{crossroad}#{direction_index}#0",
            district=district,
            crossroad=crossroad,
            direction=DIRECTIONS[direction_index],
            lat=round(30.20 + d_index * 0.03 + crossroad * 0.004 + rng.uniform(-0.001, 0.001), 6),
            lon=round(120.10 + d_index * 0.04 + crossroad * 0.003 + rng.uniform(-0.001, 0.001), 6),
            lanes=rng.choice((2, 3, 3, 4)),
            vehicle_device=vehicle_ip,
            face_device=face_ip,
        ))
    cameras = [(c.vehicle_device, c.checkpoint_id, "vehicle") for c in checkpoints]
    cameras += [(c.face_device, c.checkpoint_id, "face") for c in checkpoints if c.face_device]
    n_recognizers = -(-len(cameras) // DEVICES_PER_RECOGNIZER)
    recognizer_ips = [f"10.200.0.{n + 1}" for n in range(n_recognizers)]
    devices = {
        ip: Device(ip, checkpoint_id, kind, recognizer_ips[n % n_recognizers])
        for n, (ip, checkpoint_id, kind) in enumerate(cameras)
    }
    recognizers = tuple(
        Recognizer(r, tuple(d.device_ip for d in devices.values() if d.recognizer_ip == r)) for r in recognizer_ips
    )
    return City(seed, tuple(checkpoints), devices, recognizers, crossroads)
