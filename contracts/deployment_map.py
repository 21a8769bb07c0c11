"""The deployment map (docs/architecture.md "Record schemas"): districts, checkpoints, devices, recognisers.

The simulator writes it (a real deployment exports it from its asset register) to ``[map] path`` of
the solution config; monitoring, surveillance and the console read it from there to put a device or
a capture on the map and to know which recognition server serves which camera.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .config import Config

DEFAULT_PATH = "data/deployment_map.json"
EARTH_RADIUS_KM = 6371.0088
"""Mean Earth radius (IUGG), what haversine distances are usually quoted against."""


def haversine_km(lat1: float, lon1: float, lat2: float, lon2: float) -> float:
    """Great-circle distance in kilometres between two points given in degrees (how far apart two checkpoints
    are: the simulator moves its targets at road speeds by it, the cloned-plate check judges trips by it)."""
    phi1, phi2 = math.radians(lat1), math.radians(lat2)
    dlambda = math.radians(lon2 - lon1)
    a = math.sin((phi2 - phi1) / 2) ** 2 + math.cos(phi1) * math.cos(phi2) * math.sin(dlambda / 2) ** 2
    return 2 * EARTH_RADIUS_KM * math.asin(min(1.0, math.sqrt(a)))


@dataclass(frozen=True)
class District:
    code: str
    name: str


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


class MapError(ValueError):
    """The map file is missing, not JSON, or not shaped like a deployment map."""


@dataclass(frozen=True)
class DeploymentMap:
    districts: tuple[District, ...]
    checkpoints: tuple[Checkpoint, ...]
    devices: tuple[Device, ...]
    recognizers: tuple[Recognizer, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "districts": [asdict(d) for d in self.districts],
            "checkpoints": [asdict(c) for c in self.checkpoints],
            "devices": [asdict(d) for d in self.devices],
            "recognizers": [{"recognizer_ip": r.recognizer_ip, "devices": list(r.devices)} for r in self.recognizers],
        }

    @classmethod
    def from_json(cls, data: Any) -> DeploymentMap:
        try:
            return cls(
                tuple(District(**d) for d in data["districts"]),
                tuple(Checkpoint(**c) for c in data["checkpoints"]),
                tuple(Device(**d) for d in data["devices"]),
                tuple(Recognizer(r["recognizer_ip"], tuple(r["devices"])) for r in data["recognizers"]),
            )
        except (KeyError, TypeError) as exc:
            raise MapError(f"not a deployment map: {exc!r}") from None

    def save(self, path: Path, extra: dict[str, Any] | None = None) -> None:
        """Write atomically (readers poll the file and must never see half of it)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({**(extra or {}), **self.to_json()}, indent=1, ensure_ascii=False))
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> DeploymentMap:
        try:
            data = json.loads(Path(path).read_text())
        except FileNotFoundError:
            raise MapError(f"deployment map not found: {path}") from None
        except (OSError, ValueError) as exc:
            raise MapError(f"cannot read deployment map {path}: {exc}") from None
        return cls.from_json(data)


def map_path(config: Config) -> Path:
    """Where the map lives: ``[map] path`` of the solution config."""
    return Path(config.get("map", "path", DEFAULT_PATH))
