"""``python -m ingest.simulate``: the city's capture devices and recognisers publishing to the bus.

Produces vehicle and face records (key = checkpoint_id) to ``capture.vehicle`` / ``capture.face``
at ``--rate`` records/s on average (shaped by the daily curve), device heartbeats with cumulative
per-device counters to ``device.heartbeat``, saves the deployment map as JSON, keeps a status line
on stderr and ends with one JSON summary line on stdout (counts are of records the broker
acknowledged), after ``--count`` records, ``--duration`` seconds, or SIGINT/SIGTERM.

Each capture's image (a JPEG, ``[simulator] image_*``) is uploaded to the object store's ``captures`` bucket before
its record is published, so ``image_url`` names an object that exists; a record whose image could not be stored is
published with ``image_url`` empty and ``image_error`` saying why. ``--no-images`` (``[simulator] images = false``)
publishes records only (nothing uploaded; each says ``image_error`` ``images_off``), for load tests.

With a DR site (``[site] record``, the active-site record of :mod:`contracts.active_site`) the devices follow the
active site, so no device is reconfigured by a switchover (:class:`SiteFollower`): they produce to the bus of the site
the record names, hold while it says a switchover drains, and at the new site first produce again what the old one
refused (its writes are fenced). The summary then also says per site what it acknowledged, and how many records were
re-sent.
"""

from __future__ import annotations

import argparse
import itertools
import json
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from contracts import active_site, bus_client, s3_credentials
from contracts.config import Config, add_config_flag, preparse_config
from contracts.deployment_map import map_path
from contracts.records import Kind, encode, format_time
from contracts.topics import Topics
from contracts.topics import partitions as topic_partitions

from .city import City, build_city
from .images.render import ImageSettings, Renderer
from .images.stage import OUTCOMES, UPLOADED, WORKERS, ImageStage, Ready
from .images.store import ImageStore, S3Images, SiteImages, Uploader
from .producer import Delivered, RecordProducer, open_producer
from .traffic import Emitted, Traffic, TrafficConfig

PRINCIPAL = "simulator"
TICK_S = 0.01
MAX_PER_TICK = 5000
MOVE_FLUSH_S = 5.0
"""How long each wait for the old site's outcomes lasts when the devices move (one line on stderr per wait)."""
MOVE_GIVE_UP_S = 15.0
"""How long the devices wait for a site they leave that does not answer (lost: an unplanned switchover) before they
send what it has not acknowledged at the new site."""


@dataclass
class Tally:
    """What the broker acknowledged, and what could not be delivered."""

    produced: Counter[str] = field(default_factory=Counter)
    unrecognized: Counter[str] = field(default_factory=Counter)
    malformed: Counter[str] = field(default_factory=Counter)
    heartbeats: int = 0
    images: Counter[str] = field(default_factory=Counter)
    """Published captures per image outcome: uploaded, or marked (upload_failed, no_image, render_failed)."""
    image_faults: Counter[str] = field(default_factory=Counter)
    """Stored images that show a device fault (blurred, truncated, black): what the monitor's checks must find."""
    failed: int = 0
    errors: list[str] = field(default_factory=list)

    def delivery(self, topic: str, emitted: Emitted | None) -> Any:
        def done(error: str | None) -> None:
            if error is not None:
                self.failed += 1
                if len(self.errors) < 5:
                    self.errors.append(error)
            elif emitted is None:
                self.heartbeats += 1
            else:
                self.produced[topic] += 1
                self.unrecognized[topic] += emitted.unrecognized
                self.malformed[topic] += emitted.malformed

        return done


@dataclass
class Unacked:
    """A record no site has acknowledged yet: kept to be produced again at the next site, in the order of ``seq``."""

    seq: int
    topic: str
    key: bytes
    value: bytes
    on_delivery: Delivered
    error: str | None = None
    """Why the last site refused it; None: never sent (produced while the devices held)."""


class SiteFollower:
    """A :class:`~ingest.producer.RecordProducer` for devices that follow the active site
    (:class:`contracts.active_site.SiteRecord`).

    Records go to the bus of the site the record names. What a site refuses (its writes fenced by a switchover, said
    in the delivery report or at once by the client, or a delivery timed out) is kept, not reported: when the record
    names another site, the old bus is flushed until every record has its outcome, the refused ones are produced at
    the new bus in their original order (before any new one, so each key keeps its order), and the old producer is
    let go. A record's delivery callback is called once: when a site acknowledges it, or at :meth:`flush` with the
    last refusal. The new site's topics are not created: they are the mirror's, there since it began copying.
    """

    def __init__(self, record: active_site.SiteRecord, site: str, producer: RecordProducer,
                 connect: Callable[[str], RecordProducer]) -> None:
        """``producer`` reaches ``site``'s bus (the record's site at the start); ``connect`` opens another site's."""
        self.record = record
        self.site = site
        self.producer = producer
        self.connect = connect
        self.holding = False
        self.acked: dict[str, Counter[str]] = {name: Counter() for name in active_site.SITES}
        """Per site, the records it acknowledged, per topic."""
        self.resent = 0
        self._unacked: list[Unacked] = []
        self._seq = itertools.count()

    def follow(self) -> bool:
        """Move to the site the record names if it changed; False while a switchover drains (the devices hold)."""
        site, self.holding = self.record.read()
        if site != self.site:
            self._move(site)
        return not self.holding

    def _move(self, site: str) -> None:
        """Wait until the old site has said what became of every record, so one it acknowledged is never sent again;
        then send what it refused at ``site``. A site that does not answer for :data:`MOVE_GIVE_UP_S` (lost) is given
        up: what it has not acknowledged is sent at ``site`` too, at least once (the lost site may have written some
        of it before it went, and the mirror copied them)."""
        give_up = time.monotonic() + MOVE_GIVE_UP_S
        while left := self.producer.flush(MOVE_FLUSH_S):
            print(f"{left} records still on their way to the {self.site} bus before moving to {site}",
                  file=sys.stderr)
            if time.monotonic() >= give_up:
                print(f"the {self.site} bus does not answer: its {left} records waiting are sent at {site}",
                      file=sys.stderr)
                self.producer.abandon()
                break
        self.producer, self.site = self.connect(site), site
        again = sorted(self._unacked, key=lambda unacked: unacked.seq)
        self._unacked = []
        for unacked in again:
            self.resent += unacked.error is not None
            self._send(unacked)

    def _send(self, unacked: Unacked) -> None:
        site = self.site

        def done(error: str | None) -> None:
            if error is None:
                self.acked[site][unacked.topic] += 1
                unacked.on_delivery(None)
            else:
                unacked.error = error
                self._unacked.append(unacked)

        try:
            self.producer.produce(unacked.topic, unacked.key, unacked.value, done)
        except Exception as exc:  # refused at once: the client knows the topic is refused (a fence removes WRITE,
            done(str(exc))  # and with it DESCRIBE: the topic's metadata says TOPIC_AUTHORIZATION_FAILED)

    def ensure_topics(self, partitions: Mapping[str, int], timeout: float = 15.0) -> None:
        self.producer.ensure_topics(partitions, timeout)

    def produce(self, topic: str, key: bytes, value: bytes, on_delivery: Delivered) -> None:
        """Send at the current site; while the devices hold (the run ending during a switchover), keep it."""
        unacked = Unacked(next(self._seq), topic, key, value, on_delivery)
        if self.holding:
            self._unacked.append(unacked)
        else:
            self._send(unacked)

    def poll(self, timeout: float = 0.0) -> None:
        self.producer.poll(timeout)

    def abandon(self) -> None:
        self.producer.abandon()

    def flush(self, timeout: float) -> int:
        """At the end: wait for the current site, then report what no site took (refused, or held) as failed."""
        left = self.producer.flush(timeout)
        for unacked in sorted(self._unacked, key=lambda unacked: unacked.seq):
            unacked.on_delivery(unacked.error or "held: the devices stopped while a switchover was draining")
        self._unacked = []
        return left


class Simulator:
    def __init__(self, traffic: Traffic, producer: RecordProducer, topics: Topics, rate: float,
                 heartbeat_s: float, images: ImageStage | None = None) -> None:
        """A :class:`SiteFollower` ``producer`` also tells the devices when to hold, and its sites' counts are in the
        summary."""
        self.traffic = traffic
        self.images = images
        self.producer = producer
        self.sites = producer if isinstance(producer, SiteFollower) else None
        self.topics = topics
        self.rate = rate
        self.heartbeat_s = heartbeat_s
        self.tally = Tally()
        self.emitted = 0
        self.per_device: dict[str, Counter[str]] = {ip: Counter() for ip in traffic.city.devices}
        self.stopping = False

    def run(self, count: int | None, duration: float | None, status: StatusLine) -> float:
        """Produce until ``count`` records, ``duration`` seconds or :attr:`stopping`; returns the elapsed time. While
        the devices hold (a switchover draining) nothing is generated, nothing comes due and no heartbeat is sent."""
        start = time.monotonic()
        due = 0.0
        last = start
        next_heartbeat = start
        while not self.stopping:
            now = time.monotonic()
            elapsed = now - start
            if (duration is not None and elapsed >= duration) or (count is not None and self.emitted >= count):
                break
            if self.sites is None or self.sites.follow():
                due += self.rate * self.traffic.rate_factor(elapsed) * (now - last)
                wanted = min(int(due), MAX_PER_TICK)
                if count is not None:
                    wanted = min(wanted, count - self.emitted)
                if wanted > 0:
                    due -= wanted
                    self._send(self.traffic.records(wanted, elapsed))
                if now >= next_heartbeat:
                    self._heartbeats(elapsed)
                    next_heartbeat = now + self.heartbeat_s
                if self.images is not None:
                    self._publish_images(self.images.ready())
            last = now
            status.maybe_show(self, elapsed)
            self.producer.poll(0)
            time.sleep(TICK_S)
        if self.images is not None:
            self._publish_images(self.images.drain())
        elapsed = time.monotonic() - start
        self._heartbeats(elapsed)
        return elapsed

    def _send(self, batch: list[Emitted]) -> None:
        """Publish ``batch``: at once without images (or for a malformed record, which has none), else once each
        image is stored or marked missing."""
        for emitted in batch:
            if self.images is None or emitted.record is None:
                self._publish(emitted)
            else:
                self._publish_images(self.images.submit(emitted))
        self.emitted += len(batch)

    def _publish_images(self, finished: list[Ready]) -> None:
        for ready in finished:
            self.tally.images[ready.outcome] += 1
            if ready.outcome == UPLOADED and ready.emitted.camera != "ok":
                self.tally.image_faults[ready.emitted.camera] += 1
            self._publish(ready.emitted)

    def _publish(self, emitted: Emitted) -> None:
        topic = self.topics.of_kind(emitted.kind)
        self.producer.produce(topic, emitted.key, emitted.value, self.tally.delivery(topic, emitted))
        counters = self.per_device[emitted.device_ip]
        counters["produced"] += 1
        counters["unrecognized"] += emitted.unrecognized

    def _heartbeats(self, elapsed: float) -> None:
        """Each device still online reports its cumulative counters (offline devices fall silent)."""
        now = format_time(self.traffic.clock())
        for ip, device in self.traffic.city.devices.items():
            state = self.traffic.device_state(ip, elapsed)
            if state == "offline":
                continue
            counters = self.per_device[ip]
            beat = {
                "device_ip": ip,
                "checkpoint_id": device.checkpoint_id,
                "recognizer_ip": device.recognizer_ip,
                "topic": self.topics.of_kind(Kind(device.kind)),
                "time": now,
                "status": state,
                "produced": counters["produced"],
                "unrecognized": counters["unrecognized"],
            }
            self.producer.produce(self.topics.heartbeat, ip.encode(), encode(beat), self.tally.delivery("", None))

    def summary(self, elapsed: float, seed: int) -> dict[str, Any]:
        topics = self.topics.captures
        return {
            "produced": {t: self.tally.produced[t] for t in topics},
            "unrecognized": {t: self.tally.unrecognized[t] for t in topics},
            "malformed": {t: self.tally.malformed[t] for t in topics},
            "heartbeats": self.tally.heartbeats,
            "images": None if self.images is None else {
                **{outcome: self.tally.images[outcome] for outcome in OUTCOMES},
                "faults": dict(sorted(self.tally.image_faults.items()))},
            "failed": self.tally.failed,
            "errors": self.tally.errors,
            "seconds": round(elapsed, 3),
            "rate": round(sum(self.tally.produced.values()) / elapsed, 1) if elapsed > 0 else 0.0,
            "seed": seed,
            "devices": len(self.traffic.city.devices),
            "targets": [t.plate for t in self.traffic.targets if t.plate],
            **({} if self.sites is None else {
                "sites": {site: {t: acked[t] for t in (*topics, self.topics.heartbeat)}
                          for site, acked in self.sites.acked.items()},
                "resent": self.sites.resent}),
        }


class StatusLine:
    """A live line on stderr: redrawn in place on a terminal, one line every few seconds in a log."""

    def __init__(self, stream: TextIO, interval: float | None = None) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.interval = interval if interval is not None else (0.5 if self.tty else 5.0)
        self.next_at = time.monotonic() + self.interval
        self.last_emitted = 0
        self.last_at = time.monotonic()

    def maybe_show(self, sim: Simulator, elapsed: float) -> None:
        now = time.monotonic()
        if self.interval <= 0 or now < self.next_at:
            return
        rate = (sim.emitted - self.last_emitted) / max(now - self.last_at, 1e-6)
        self.last_emitted, self.last_at, self.next_at = sim.emitted, now, now + self.interval
        hour = sim.traffic.sim_hour(elapsed)
        down = sum(sim.traffic.device_state(ip, elapsed) != "ok" for ip in sim.traffic.city.devices)
        acked = sum(sim.tally.produced.values())
        unreadable = sum(sim.tally.unrecognized.values())
        line = (f"sim {int(hour):02d}:{int(hour % 1 * 60):02d}  {rate:7.0f} rec/s  "
                f"x{sim.traffic.rate_factor(elapsed):.2f}  acked {acked}  "
                f"unrecognized {unreadable / max(acked, 1):.1%}  devices failing {down}  "
                f"heartbeats {sim.tally.heartbeats}  failed {sim.tally.failed}")
        if sim.images is not None:
            stored = sim.tally.images[UPLOADED]
            line += f"  images {stored} stored, {sum(sim.tally.images.values()) - stored} marked missing"
        if sim.sites is not None:
            line += f"  {'holding at' if sim.sites.holding else 'site'} {sim.sites.site}  resent {sim.sites.resent}"
        if self.tty:
            self.stream.write("\r\x1b[K" + line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, Config]:
    config = preparse_config(argv)
    sim = config.section("simulator")
    parser = argparse.ArgumentParser(prog="python -m ingest.simulate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_flag(parser)
    parser.add_argument("--bootstrap-server", default=config.get("bus", "bootstrap_servers", "127.0.0.1:9092"),
                        help="the bus (the client settings, e.g. its login, come from [bus] client_properties_dir); "
                             "with [site] record, the primary's (the DR site's comes from [dr])")
    parser.add_argument("--rate", type=float, default=float(sim.get("rate", 200)), help="mean records/s")
    parser.add_argument("--duration", type=float, default=None, help="stop after this many seconds")
    parser.add_argument("--count", type=int, default=None, help="stop after this many capture records")
    parser.add_argument("--seed", type=int, default=int(sim.get("seed", 1)))
    parser.add_argument("--checkpoints", type=int, default=int(sim.get("checkpoints", 24)))
    parser.add_argument("--failure-rate", type=float, default=float(sim.get("failure_rate", 0.02)))
    parser.add_argument("--malformed-rate", type=float, default=float(sim.get("malformed_rate", 0.0)),
                        help="share of deliberately broken records (dead-letter path)")
    parser.add_argument("--speedup", type=float, default=float(sim.get("speedup", 1.0)))
    parser.add_argument("--curve", choices=("daily", "flat"), default=sim.get("curve", "daily"))
    parser.add_argument("--start-hour", type=float, default=float(sim.get("start_hour", 7.0)))
    parser.add_argument("--face-share", type=float, default=float(sim.get("face_share", 0.3)))
    parser.add_argument("--cloned-pairs", type=int, default=int(sim.get("cloned_pairs", 1)),
                        help="pairs of vehicles sharing one plate in two districts (the cloned-plate check's quarry)")
    parser.add_argument("--first-sequence", type=int, default=0,
                        help="device sequence numbers (hence record ids) continue after this")
    parser.add_argument("--partitions", type=int, default=topic_partitions(config),
                        help="partitions of the data topics when this creates them")
    parser.add_argument("--heartbeat-interval", type=float, default=float(sim.get("heartbeat_interval", 5.0)))
    parser.add_argument("--status-interval", type=float, default=None, help="seconds between status lines; 0: none")
    parser.add_argument("--map", type=Path, default=map_path(config),
                        help="where to save the deployment map (JSON); default [map] path of the config")
    add_image_flags(parser, config)
    args = parser.parse_args(argv)
    if args.rate <= 0:
        parser.error("--rate must be > 0")
    try:
        args.image_settings = ImageSettings(args.images, args.image_width, args.image_height, args.image_quality)
    except ValueError as exc:
        parser.error(str(exc))
    return args, config


def add_image_flags(parser: argparse.ArgumentParser, config: Config) -> None:
    """Capture images: on or off, size and quality (``[simulator]``), and the object store they go to."""
    sim = config.section("simulator")
    defaults = ImageSettings()
    parser.add_argument("--images", action=argparse.BooleanOptionalAction, default=bool(sim.get("images", True)),
                        help="upload a JPEG per capture before publishing it (--no-images: records only, as for "
                             "load tests); default [simulator] images")
    parser.add_argument("--image-width", type=int, default=int(sim.get("image_width", defaults.width)))
    parser.add_argument("--image-height", type=int, default=int(sim.get("image_height", defaults.height)))
    parser.add_argument("--image-quality", type=int, default=int(sim.get("image_quality", defaults.quality)),
                        help="JPEG quality 1..95")
    s3_credentials.add_store_flags(parser, config, PRINCIPAL)
    s3_credentials.add_dr_store_flags(parser, config, PRINCIPAL)


def open_images(args: argparse.Namespace, config: Config,
                record: active_site.SiteRecord | None = None) -> ImageStage | None:
    """The image stage, or None with ``--no-images``, or when no key for the store is found at all (said on
    stderr: the records then go out as with ``--no-images``). A key file that is unusable is an error. With a
    ``record`` (``[site]``) and a key at the DR site's store, the images follow the active site as the records do."""
    if not args.images:
        return None
    try:
        key = s3_credentials.resolve(config, PRINCIPAL, args.s3_credentials)
    except s3_credentials.MissingCredentials as exc:
        print(f"capture images off: {exc}", file=sys.stderr)
        return None
    renderer = Renderer(args.seed, args.image_settings)
    store: ImageStore = S3Images(args.endpoint, key, connections=WORKERS)
    dr_key = s3_credentials.resolve_dr(config, PRINCIPAL, args.dr_s3_credentials) if record is not None else None
    if record is not None and dr_key is not None and args.dr_endpoint:
        store = SiteImages({"primary": store, "dr": S3Images(args.dr_endpoint, dr_key, connections=WORKERS)},
                           lambda: record.read()[0])
    return ImageStage(renderer, Uploader(store), workers=WORKERS)


def make_traffic(args: argparse.Namespace, images: bool = True) -> tuple[City, Traffic]:
    """The city and its traffic for ``args``; ``images``: whether the records will have images (the image stage
    runs), else they say they have none."""
    city = build_city(args.seed, args.checkpoints)
    config = TrafficConfig(seed=args.seed, failure_rate=args.failure_rate, malformed_rate=args.malformed_rate,
                           face_share=args.face_share, curve=args.curve, start_hour=args.start_hour,
                           speedup=args.speedup, first_sequence=args.first_sequence, cloned_pairs=args.cloned_pairs,
                           images=images)
    return city, Traffic(city, config)


def bus_settings(config: Config, args: argparse.Namespace, site: str) -> dict[str, str]:
    """The simulator's client settings for ``site``'s bus: the primary's from ``[bus]`` (``--bootstrap-server``
    naming its address), the DR site's from ``[dr]``."""
    if site == "primary":
        return bus_client.librdkafka(config, PRINCIPAL, args.bootstrap_server)
    return bus_client.librdkafka(config, PRINCIPAL, section=bus_client.DR)


def main(argv: list[str] | None = None) -> int:
    args, config = parse_args(argv)
    record = active_site.SiteRecord.from_config(config)
    try:
        images = open_images(args, config, record)
    except s3_credentials.CredentialsError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    city, traffic = make_traffic(args, images is not None)
    city.save(args.map)
    topics = Topics.from_config(config)
    site = "primary" if record is None else record.read()[0]
    settings = bus_settings(config, args, site)
    producer = open_producer(settings)
    try:
        producer.ensure_topics({topics.vehicle: args.partitions, topics.face: args.partitions,
                                topics.heartbeat: args.partitions})
    except Exception as exc:  # the client's own exception types stay behind the producer interface
        print(f"cannot reach the bus at {settings['bootstrap.servers']}: {exc}", file=sys.stderr)
        return 2
    if record is not None:
        producer = SiteFollower(record, site, producer, lambda other: open_producer(bus_settings(config, args, other)))
    simulator = Simulator(traffic, producer, topics, args.rate, args.heartbeat_interval, images)

    def stop(*_: object) -> None:
        simulator.stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    status = StatusLine(sys.stderr, args.status_interval)
    elapsed = simulator.run(args.count, args.duration, status)
    if images is not None:
        images.close()
    left = producer.flush(30.0)
    status.close()
    simulator.tally.failed += left
    print(json.dumps(simulator.summary(elapsed, args.seed), ensure_ascii=False), flush=True)
    return 0 if simulator.tally.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

