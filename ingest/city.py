"""A deterministic city: districts, crossroads, checkpoints, capture devices and recognisers.

The deployment map is what the operator console draws and what routes and device failures are
planned on; the same seed and checkpoint count always give the same city, so a run can be
reproduced and its map saved as JSON beside it.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path

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
class Checkpoint:
    """A capture point at a crossroad, facing one direction; id ``district#crossroad#direction#index``."""

    checkpoint_id: str
    district: str
    crossroad: int
    direction: str
    lat: float
    lon: float
    lanes: int
    vehicle_device: str
    face_device: str | None


@dataclass(frozen=True)
class Device:
    """A camera: the checkpoint it watches, what it captures, and the recogniser that serves it."""

    device_ip: str
    checkpoint_id: str
    kind: str
    recognizer_ip: str


@dataclass(frozen=True)
class Recognizer:
    recognizer_ip: str
    devices: tuple[str, ...]


@dataclass(frozen=True)
class City:
    seed: int
    checkpoints: tuple[Checkpoint, ...]
    devices: dict[str, Device]
    recognizers: tuple[Recognizer, ...]
    crossroads: dict[str, list[int]] = field(default_factory=dict)
    """Per district, the crossroad numbers in use (routes walk between neighbours)."""

    def to_json(self) -> dict[str, object]:
        return {
            "seed": self.seed,
            "districts": [{"code": code, "name": name} for code, name in DISTRICTS],
            "checkpoints": [asdict(c) for c in self.checkpoints],
            "devices": [asdict(d) for d in self.devices.values()],
            "recognizers": [{"recognizer_ip": r.recognizer_ip, "devices": list(r.devices)} for r in self.recognizers],
        }

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.to_json(), indent=1, ensure_ascii=False))
        tmp.replace(path)

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
