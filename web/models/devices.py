"""``/api/v1/map``, ``/api/v1/devices``, ``/api/v1/checkpoints/{id}``: the deployment map as the console serves it."""

from __future__ import annotations

from pydantic import BaseModel

# The map's own dataclasses serve as response models (Pydantic validates and documents them), so the
# API cannot drift from the contract.
from contracts.deployment_map import Checkpoint, District, Recognizer
from web.models.captures import CaptureItem, Location


class MapDevice(BaseModel):
    """The contract's ``Device`` as a model, because ``DeviceOut`` extends it with a location."""

    device_ip: str
    checkpoint_id: str
    kind: str
    recognizer_ip: str


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
