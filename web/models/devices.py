"""``/api/v1/map``, ``/api/v1/devices``, ``/api/v1/checkpoints/{id}``: the deployment map as the console serves it."""

from __future__ import annotations

from pydantic import BaseModel

from web.models.captures import CaptureItem, Location


class District(BaseModel):
    code: str
    name: str


class Checkpoint(BaseModel):
    checkpoint_id: str
    district: str
    crossroad: int
    direction: str
    lat: float
    lon: float
    lanes: int
    vehicle_device: str
    face_device: str | None


class MapDevice(BaseModel):
    device_ip: str
    checkpoint_id: str
    kind: str
    recognizer_ip: str


class Recognizer(BaseModel):
    recognizer_ip: str
    devices: list[str]


class DeploymentMapOut(BaseModel):
    districts: list[District]
    checkpoints: list[Checkpoint]
    devices: list[MapDevice]
    recognizers: list[Recognizer]


class DeviceOut(MapDevice):
    location: Location | None


class CheckpointDetail(BaseModel):
    checkpoint: Checkpoint
    location: Location | None
    devices: list[DeviceOut]
    latest: list[CaptureItem]
    """The checkpoint's newest captures (vehicles and faces), newest first."""
