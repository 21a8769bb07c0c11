"""The surveillance service's test data, for its tests and benchmarks/surveillance.py: a small city map (two
districts, eight checkpoints), a solution config naming a broker and that map, and capture records shaped by the
simulator's own value generators.
"""

from __future__ import annotations

import json
import random
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from contracts.deployment_map import Checkpoint, DeploymentMap, Device, District, Recognizer
from contracts.records import CITY_TZ, format_time
from ingest import values

DISTRICTS = ("330102", "330106")


def city_map() -> DeploymentMap:
    """Two districts, four crossroads each, one checkpoint per crossroad with a vehicle and a face camera."""
    districts, checkpoints, devices = [], [], []
    for d, code in enumerate(DISTRICTS):
        districts.append(District(code, f"district {d}"))
        for n in range(4):
            cp = f"{code}#{n}#0#0"
            vehicle_ip, face_ip = f"10.{d}.{n}.1", f"10.{d}.{n}.2"
            checkpoints.append(Checkpoint(cp, code, n, "N", 30.25 + d / 10 + n / 100, 120.15 + n / 100, 2,
                                          vehicle_ip, face_ip))
            devices += [Device(vehicle_ip, cp, "vehicle", "10.9.9.9"), Device(face_ip, cp, "face", "10.9.9.9")]
    return DeploymentMap(tuple(districts), tuple(checkpoints), tuple(devices),
                         (Recognizer("10.9.9.9", tuple(d.device_ip for d in devices)),))



CHECKPOINTS = tuple(c.checkpoint_id for c in city_map().checkpoints)



def write_config(directory: Path, bootstrap: str, **surveillance: Any) -> Path:
    """A solution config naming the test broker and map; ``surveillance`` overrides ``[surveillance]``."""
    city_map().save(directory / "map.json")
    section = {"metrics_port": 0, "commit_interval_s": 0.2, **surveillance}
    lines = ["[bus]", f'bootstrap_servers = "{bootstrap}"', "[map]", f'path = "{directory / "map.json"}"',
             "[surveillance]"] + [f"{key} = {json.dumps(value)}" for key, value in section.items()]
    path = directory / "solution.toml"
    path.write_text("\n".join(lines) + "\n")
    return path



def capture_time(offset_s: float = 0.0) -> str:
    return format_time(datetime.now(CITY_TZ) + timedelta(seconds=offset_s))



def vehicle(record_id: str, checkpoint_id: str, plate: str, rng: random.Random, when: str | None = None) -> dict:
    """A valid vehicle record as the simulator writes one, with the plate and place the test chose."""
    return {"record_id": record_id, "checkpoint_id": checkpoint_id, "device_ip": "10.0.0.1",
            "recognizer_ip": "10.9.9.9", "capture_time": when or capture_time(),
            **values.vehicle_attributes(rng), "plate_number": plate, "lane": 1, "speed_kmh": 42.0,
            "image_url": f"s3://captures/{record_id}.jpg"}



def face(record_id: str, checkpoint_id: str, rng: random.Random, identity: list[float] | None = None,
         noise: float = 0.15) -> dict:
    return {"record_id": record_id, "checkpoint_id": checkpoint_id, "device_ip": "10.0.0.2",
            "recognizer_ip": "10.9.9.9", "capture_time": capture_time(), **values.face_attributes(rng),
            "feature": values.feature(rng, identity, noise), "image_url": f"s3://captures/{record_id}.jpg"}
