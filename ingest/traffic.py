"""What the city's cameras see: the daily curve, device failures, recognition failures and targets.

:class:`Traffic` is a pure generator: given the seed, the simulated elapsed time and a clock for
``capture_time``, it returns the next records. It never touches the network, which is what makes
the simulator's determinism testable (same seed + same clock -> byte-identical records).

Time: the *simulated* day (``start_hour`` + elapsed x ``speedup``) drives the rush-hour curve and
device failures, so a day can be watched in minutes. ``capture_time`` is the clock's time (the
wall clock in a real run): latency (ingest_time - capture_time) stays meaningful at any speedup.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from contracts.deployment_map import haversine_km
from contracts.records import CITY_TZ, IMAGE_ERROR, RECOGNIZED_FIELDS, UNRECOGNIZED, Kind, encode, format_time

from . import values
from .city import City, Device
from .images import keys

DAY_S = 24 * 3600.0


@dataclass(frozen=True)
class TrafficConfig:
    seed: int = 1
    failure_rate: float = 0.02
    """Share of records a healthy recogniser cannot fully read (some fields ``UNRECOGNIZED``)."""
    malformed_rate: float = 0.0
    """Share of records sent broken (not JSON, missing or mistyped fields): exercises the dead-letter path."""
    face_share: float = 0.3
    curve: str = "daily"
    """``daily`` (night trough, morning and evening rush) or ``flat`` (a fixed rate, for benchmarks)."""
    start_hour: float = 7.0
    speedup: float = 1.0
    target_plates: int = 4
    target_faces: int = 2
    target_every: int = 150
    """One capture in this many is a target's turn: its next sighting along its route, once it can be there."""
    target_speed_kmh: float = 40.0
    """How fast targets drive between the checkpoints of their routes (a city car; far below a clone's speed)."""
    cloned_pairs: int = 0
    """Pairs of vehicles that share one plate (套牌), each pair on routes in two districts: what the cloned-plate
    check must find (every other plate belongs to one vehicle)."""
    failing_device_share: float = 0.1
    image_fault_share: float = 0.06
    """Share of devices whose images go wrong for a while (:data:`IMAGE_FAULT_MODES`), apart from the failing ones."""
    first_sequence: int = 0
    """Device sequence numbers continue after this: runs that must not reuse record ids start higher."""
    images: bool = True
    """Whether the devices send images; without, a record's ``image_url`` is empty and its ``image_error`` says so."""


def daily_factor(hour: float) -> float:
    """Traffic relative to the day's mean: low at night, peaks at 08:00 and 18:00 (~2.3x the mean)."""
    base = 0.35 + 0.25 * math.sin(math.pi * (hour - 6.0) / 12.0) if 6.0 <= hour <= 22.0 else 0.15
    rush = 1.8 * math.exp(-(((hour - 8.0) / 1.1) ** 2)) + 1.7 * math.exp(-(((hour - 18.0) / 1.3) ** 2))
    return (base + rush) / _DAILY_MEAN


def _raw_mean() -> float:
    steps = 2880
    total = 0.0
    for i in range(steps):
        hour = 24.0 * i / steps
        base = 0.35 + 0.25 * math.sin(math.pi * (hour - 6.0) / 12.0) if 6.0 <= hour <= 22.0 else 0.15
        total += base + 1.8 * math.exp(-(((hour - 8.0) / 1.1) ** 2)) + 1.7 * math.exp(-(((hour - 18.0) / 1.3) ** 2))
    return total / steps


_DAILY_MEAN = _raw_mean()

FAILURE_MODES = ("blurred", "blocked", "offline")
IMAGE_FAULT_MODES = ("missing", "truncated", "black")
"""A device that still reads plates but whose images go wrong: none sent, a truncated JPEG, a black frame. What the
monitor's image checks must find; separate from :data:`FAILURE_MODES` so the record stream stays as it was."""


@dataclass(frozen=True)
class DeviceFailure:
    """A device out of order for a simulated window: blurred (mostly unreadable), blocked (sees
    nothing but still reports), offline (neither records nor heartbeats)."""

    device_ip: str
    mode: str
    start_s: float
    end_s: float

    def active(self, sim_s: float) -> bool:
        return self.start_s <= sim_s < self.end_s


def plan_failures(city: City, config: TrafficConfig) -> dict[str, DeviceFailure]:
    """Pick the failing devices and their windows; the first one fails from the start, so short runs show one."""
    rng = random.Random(f"failures-{config.seed}")
    devices = sorted(city.devices)
    count = min(len(devices), max(1, round(len(devices) * config.failing_device_share))) if devices else 0
    plan = {}
    for n, ip in enumerate(rng.sample(devices, count)):
        start = 0.0 if n == 0 else rng.uniform(0, 4 * 3600)
        plan[ip] = DeviceFailure(ip, FAILURE_MODES[n % len(FAILURE_MODES)], start, start + rng.uniform(600, 3600))
    return plan


def plan_image_faults(city: City, config: TrafficConfig, failing: dict[str, DeviceFailure]) -> dict[str, DeviceFailure]:
    """Devices whose images go wrong, for a window each, among those not failing otherwise; the first from the
    start, so short runs show one. Its own generator: planning them does not change any record."""
    rng = random.Random(f"image-faults-{config.seed}")
    devices = sorted(set(city.devices) - set(failing))
    count = min(len(devices), max(1, round(len(city.devices) * config.image_fault_share))) if devices else 0
    plan = {}
    for n, ip in enumerate(rng.sample(devices, count)):
        start = 0.0 if n == 0 else rng.uniform(0, 4 * 3600)
        mode = IMAGE_FAULT_MODES[n % len(IMAGE_FAULT_MODES)]
        plan[ip] = DeviceFailure(ip, mode, start, start + rng.uniform(600, 3600))
    return plan


@dataclass
class Target:
    """A watched plate or face that recurs along a route of neighbouring checkpoints, at road speed."""

    kind: Kind
    route: list[str]
    plate: str | None = None
    identity: list[float] | None = None
    position: int = 0
    due: datetime | None = None
    """Not at the next checkpoint of its route before this capture time."""

    def next_checkpoint(self, now: datetime, distance_km: Callable[[str, str], float], speed_kmh: float) -> str | None:
        """Where the target is seen at ``now``, or None while it is still driving to its next checkpoint."""
        if self.due is not None and now < self.due:
            return None
        checkpoint = self.route[self.position % len(self.route)]
        self.position += 1
        following = self.route[self.position % len(self.route)]
        self.due = now + timedelta(hours=distance_km(checkpoint, following) / speed_kmh)
        return checkpoint


@dataclass(frozen=True)
class Emitted:
    """One record ready for the bus, plus what the simulator counts about it and what its image shows."""

    kind: Kind
    key: bytes
    value: bytes
    device_ip: str
    unrecognized: bool = False
    malformed: bool = False
    record: dict[str, Any] | None = field(default=None, compare=False, repr=False)
    """The record ``value`` encodes (None when malformed: a broken record has no image): what its image shows."""
    camera: str = "ok"
    """The device's state as its image shows it: ``ok``, ``blurred`` or one of :data:`IMAGE_FAULT_MODES`."""


@dataclass
class Traffic:
    city: City
    config: TrafficConfig
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(CITY_TZ))

    def __post_init__(self) -> None:
        self.rng = random.Random(self.config.seed)
        self.failures = plan_failures(self.city, self.config)
        self.image_faults = plan_image_faults(self.city, self.config, self.failures)
        self.sequences: dict[str, int] = {}
        self._places = {c.checkpoint_id: c for c in self.city.checkpoints}
        self.targets = self._plan_targets()
        self._target_plates = {t.plate for t in self.targets if t.plate}
        self._plates = random.Random(f"plates-{self.config.seed}").randrange(values.PLATE_TAILS) + \
            self.config.first_sequence * len(self.city.devices)
        """Number of the next passer-by's plate (:func:`values.numbered_plate`); a restart continues after
        the records of the run before (``first_sequence`` per device)."""
        self._captured = 0
        self._by_kind = {
            kind: [d for d in self.city.devices.values() if d.kind == kind.value] for kind in (Kind.VEHICLE, Kind.FACE)
        }

    # -- time ---------------------------------------------------------------------------------
    def sim_seconds(self, elapsed_s: float) -> float:
        return elapsed_s * self.config.speedup

    def sim_hour(self, elapsed_s: float) -> float:
        return (self.config.start_hour + self.sim_seconds(elapsed_s) / 3600.0) % 24.0

    def rate_factor(self, elapsed_s: float) -> float:
        return 1.0 if self.config.curve == "flat" else daily_factor(self.sim_hour(elapsed_s))

    def device_state(self, device_ip: str, elapsed_s: float) -> str:
        failure = self.failures.get(device_ip)
        if failure and failure.active(self.sim_seconds(elapsed_s)):
            return failure.mode
        return "ok"

    def camera_state(self, device_ip: str, elapsed_s: float) -> str:
        """What a capture's image shows of its device: a blurred lens, an image fault, or ``ok``."""
        state = self.device_state(device_ip, elapsed_s)
        if state != "ok":
            return state
        fault = self.image_faults.get(device_ip)
        return fault.mode if fault and fault.active(self.sim_seconds(elapsed_s)) else "ok"

    # -- targets ------------------------------------------------------------------------------
    def _plan_targets(self) -> list[Target]:
        rng = random.Random(f"targets-{self.config.seed}")
        targets = []
        for n in range(self.config.target_plates + self.config.target_faces):
            kind = Kind.VEHICLE if n < self.config.target_plates else Kind.FACE
            route = self._route(rng, kind)
            if not route:
                continue
            if kind is Kind.VEHICLE:
                targets.append(Target(kind, route, plate=values.plate(rng, "blue")))
            else:
                targets.append(Target(kind, route, identity=values.unit_vector(rng)))
        for _ in range(self.config.cloned_pairs):
            first = self._route(rng, Kind.VEHICLE)
            districts = sorted({c.district for c in self.city.checkpoints} - {self._places[first[0]].district})
            if not districts:
                break  # a one-district city has nowhere for the twin to be
            plate = values.plate(rng, "blue")
            second = self._route(rng, Kind.VEHICLE, rng.choice(districts))
            targets += [Target(Kind.VEHICLE, first, plate=plate), Target(Kind.VEHICLE, second, plate=plate)]
        return targets

    def distance_km(self, a: str, b: str) -> float:
        first, second = self._places[a], self._places[b]
        return haversine_km(first.lat, first.lon, second.lat, second.lon)

    def _route(self, rng: random.Random, kind: Kind, district: str | None = None) -> list[str]:
        """Consecutive crossroads of one district, one checkpoint (with a camera of ``kind``) at each."""
        usable = [
            c for c in self.city.checkpoints if kind is Kind.VEHICLE or c.face_device is not None
        ]
        if not usable:
            return []
        if district is None or district not in {c.district for c in usable}:
            district = rng.choice(sorted({c.district for c in usable}))
        route = []
        for crossroad in sorted({c.crossroad for c in usable if c.district == district}):
            choices = [c for c in usable if c.district == district and c.crossroad == crossroad]
            route.append(rng.choice(choices).checkpoint_id)
        return route

    # -- records ------------------------------------------------------------------------------
    def records(self, count: int, elapsed_s: float) -> list[Emitted]:
        """The next ``count`` captures at simulated time ``elapsed_s`` (fewer if every device is down)."""
        active = {kind: self.active_devices(kind, elapsed_s) for kind in self._by_kind}
        out = []
        for _ in range(count):
            emitted = self._one(elapsed_s, active)
            if emitted is not None:
                out.append(emitted)
        return out

    def active_devices(self, kind: Kind, elapsed_s: float) -> list[Device]:
        return [d for d in self._by_kind[kind] if self.device_state(d.device_ip, elapsed_s) in ("ok", "blurred")]

    def _one(self, elapsed_s: float, active: dict[Kind, list[Device]]) -> Emitted | None:
        rng = self.rng
        self._captured += 1
        kind = Kind.FACE if rng.random() < self.config.face_share else Kind.VEHICLE
        target = None
        devices = active[kind]
        if self.targets and self._captured % self.config.target_every == 0:
            turn = self.targets[(self._captured // self.config.target_every) % len(self.targets)]
            wanted = turn.next_checkpoint(self.clock(), self.distance_km, self.config.target_speed_kmh)
            at_wanted = [d for d in active[turn.kind] if d.checkpoint_id == wanted]
            if at_wanted:  # else still on its way, or passing a camera that is down: unseen
                target, kind, devices = turn, turn.kind, at_wanted
        if not devices:
            return None
        device = rng.choice(devices)
        record = self._record(kind, device, target)
        unreadable = self._unreadable(kind, device, elapsed_s)
        for name in unreadable:
            record[name] = UNRECOGNIZED
        if self.config.malformed_rate and rng.random() < self.config.malformed_rate:
            return Emitted(kind, device.checkpoint_id.encode(), self._break(record), device.device_ip,
                           malformed=True)
        return Emitted(kind, device.checkpoint_id.encode(), encode(record), device.device_ip,
                       unrecognized=bool(unreadable), record=record,
                       camera=self.camera_state(device.device_ip, elapsed_s))

    def _record(self, kind: Kind, device: Device, target: Target | None) -> dict[str, Any]:
        rng = self.rng
        seq = self.sequences.get(device.device_ip, self.config.first_sequence) + 1
        self.sequences[device.device_ip] = seq
        record_id = f"{device.device_ip}-{seq}"
        head = {
            "record_id": record_id,
            "checkpoint_id": device.checkpoint_id,
            "device_ip": device.device_ip,
            "recognizer_ip": device.recognizer_ip,
            "capture_time": format_time(self.clock()),
        }
        image: dict[str, str] = {"image_url": keys.url(keys.object_key(
            kind, device.checkpoint_id, record_id, head["capture_time"]))} if self.config.images else {
            "image_url": "", IMAGE_ERROR: keys.IMAGES_OFF}
        if kind is Kind.VEHICLE:
            attrs = values.vehicle_attributes(rng)
            if target is not None and target.plate:
                attrs["plate_number"] = target.plate
            else:
                attrs["plate_number"] = self._passer_by_plate(str(attrs["plate_number"]))
            lanes = next(c.lanes for c in self.city.checkpoints if c.checkpoint_id == device.checkpoint_id)
            return {**head, **attrs, "lane": rng.randint(1, lanes), "speed_kmh": round(rng.uniform(12, 75), 1),
                    **image}
        attrs = values.face_attributes(rng)
        identity = target.identity if target is not None else None
        return {**head, **attrs, "feature": values.feature(rng, identity), **image}

    def _passer_by_plate(self, drawn: str) -> str:
        """A plate no other vehicle of this run carries (``drawn`` keeps the province and city letter)."""
        while True:
            self._plates += 1
            plate = values.numbered_plate(drawn, self._plates)
            if plate not in self._target_plates:
                return plate

    def _unreadable(self, kind: Kind, device: Device, elapsed_s: float) -> list[str]:
        """Fields this capture's recogniser could not read: rarely for a healthy device, mostly when blurred."""
        rng = self.rng
        odds = 0.8 if self.device_state(device.device_ip, elapsed_s) == "blurred" else self.config.failure_rate
        if rng.random() >= odds:
            return []
        fields = RECOGNIZED_FIELDS[kind]
        first = fields[0] if rng.random() < 0.6 else rng.choice(fields)  # plate / gender fail most often
        extra = rng.sample(fields, rng.randint(0, 2))
        return sorted({first, *extra}, key=fields.index)

    def _break(self, record: dict[str, Any]) -> bytes:
        """A record that is not a record: truncated JSON, a missing field or a field of the wrong type."""
        how = self.rng.randrange(3)
        if how == 0:
            return encode(record)[: self.rng.randint(1, 40)]
        if how == 1:
            record.pop("capture_time")
        else:
            record["capture_time"] = "yesterday"
        return encode(record)
