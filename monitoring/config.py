"""The ``[monitoring]`` section of the solution config: rules, route, receivers, inhibition, health.

Everything is checked at start-up and a mistake stops the monitor with a message naming the rule
(or receiver) and the field, because a rule that silently never fires is worse than no monitor.
Every interval is in seconds (floats allowed), so a test can run a whole incident in a minute.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from contracts.config import Config
from contracts.ingest_stats import STAGES

from .matchers import Matcher

KINDS = ("latency_p99", "device_quality", "device_silent", "recognizer_degraded", "ingest_stalled", "consumer_lag",
         "capture_images", "video_gap", "video_quality")
SHARE_KINDS = ("device_quality", "recognizer_degraded", "capture_images")
"""Kinds whose threshold is a share 0..1."""
SEVERITIES = ("info", "warning", "critical")
RECEIVER_TYPES = ("webhook", "smtp", "alertmanager")
ALERTMANAGER = "alertmanager"
"""A real Alertmanager (``monitoring.alertmanager``): it gets every alert, not through the built-in route."""


class ConfigError(ValueError):
    """An invalid ``[monitoring]`` setting; the message names where it is."""


@dataclass(frozen=True)
class Rule:
    """One alerting rule. ``threshold`` means, by kind: milliseconds (latency_p99), share of bad records
    0..1 (device_quality), seconds without a heartbeat (device_silent), share of a recogniser's devices
    unhealthy 0..1 (recognizer_degraded), seconds the ingest is behind while devices produce (time
    since its last ``ingest.stats`` record plus how late that batch read its newest record:
    ingest_stalled), records behind (consumer_lag), share of a device's sampled capture images that are
    missing, undecodable or black 0..1 (capture_images), seconds since a camera's newest segment began
    (video_gap), judged segments in a row that are bad, at least 1 (video_quality)."""

    name: str
    kind: str
    threshold: float
    for_s: float = 0.0
    keep_firing_for_s: float = 0.0
    severity: str = "warning"
    stage: str = "capture_to_ingest"
    group: str = ""
    summary: str = ""


@dataclass(frozen=True)
class Route:
    group_by: tuple[str, ...] = ("alertname",)
    group_wait_s: float = 10.0
    group_interval_s: float = 60.0
    repeat_interval_s: float = 4 * 3600.0
    receivers: tuple[str, ...] = ()
    """Receivers every group is sent to; empty means all."""


@dataclass(frozen=True)
class Receiver:
    name: str
    type: str
    url: str = ""
    host: str = ""
    port: int = 25
    from_addr: str = ""
    to: tuple[str, ...] = ()
    timeout_s: float = 5.0
    send_resolved: bool = True
    resend_s: float = 60.0
    """``alertmanager`` only: a firing alert is re-sent at least this often (Prometheus' resend delay)."""


@dataclass(frozen=True)
class InhibitRule:
    source: tuple[Matcher, ...]
    target: tuple[Matcher, ...]
    equal: tuple[str, ...]


@dataclass(frozen=True)
class Health:
    """How device states are judged from counts (``[monitoring.health]``)."""

    window_s: float = 60.0
    degraded_share: float = 0.2
    recognizer_share: float = 0.5
    silent_after_s: float = 15.0
    recovery_s: float = 60.0
    min_records: int = 10
    """Fewer produced (or expected) records than this in a window say nothing about quality."""
    ingest_delay_s: float = 2.0
    """Allowance before lost-record judgements hold: while the ingest is behind by more than
    ``window_s + ingest_delay_s``, no device is newly degraded or cleared for lost records."""


@dataclass(frozen=True)
class Images:
    """The capture-image sampler (``[monitoring.images]``, :mod:`monitoring.image_sampler`): which records'
    images are fetched and judged, and when a device's share of bad ones degrades it."""

    enabled: bool = True
    """Off, or on without an object-store key for ``monitor``: no image is fetched, no device judged by images."""
    sample_share: float = 0.02
    """Share of capture records whose image is judged, chosen by a hash of ``record_id`` (the same records on
    every run and every monitor)."""
    max_per_s: float = 20.0
    """At most this many images fetched per second; sampled records beyond it are skipped (counted), so a
    backlog or a busy city never makes the sampler fall behind or load the store."""
    window_s: float = 300.0
    """A device's images are judged over this much capture time (at 2 % of ~1 record/s a device yields one
    sampled image a minute: the window must be long enough to hold ``min_images``)."""
    degraded_share: float = 0.5
    min_images: int = 3
    """Fewer judged images than this in a window say nothing about a device."""
    black_luminance: float = 8.0
    """A decodable image whose mean luminance (0..255) is under this is ``black`` (a dead sensor)."""
    max_bytes: int = 8 << 20
    """An object larger than this is not read whole; it counts as ``undecodable`` (no capture JPEG is that big)."""


@dataclass(frozen=True)
class Video:
    """The cameras' footage watch (``[monitoring.video]``, :mod:`monitoring.video_watch`): how often the ``videos``
    bucket is listed, when a camera has a gap, how many segments are judged, and the judge's thresholds
    (:mod:`monitoring.video_judge`)."""

    enabled: bool = True
    """Off, or on without an object-store key for ``monitor``: no camera is watched."""
    interval_s: float = 30.0
    """The bucket is listed (each camera's prefixes of today and, when needed, yesterday) this often."""
    segment_s: float = 60.0
    """How long the cameras' segments are (``[cameras] segment_s``): one new segment per camera this often."""
    gap_factor: float = 3.0
    """A camera whose newest segment began more than ``gap_factor * segment_s`` ago has a gap: silent."""
    max_per_interval: int = 20
    """At most this many new segments downloaded and judged per interval, newest of each camera first; the others
    are skipped (counted), never queued, so the watch never falls behind."""
    bad_segments: int = 2
    """A camera is degraded with reason ``video`` once its newest this many judged segments are all bad; one good
    segment clears it."""
    max_bytes: int = 256 << 20
    """A larger segment is not downloaded (skipped, counted ``too_large``)."""
    frames_sampled: int = 8
    """Frames measured per segment, evenly spread (every frame is decoded, to find a segment that ends early)."""
    black_luminance: float = 8.0
    """Mean grey level (0..255) of the sampled frames under this: ``black``."""
    blur_laplacian: float = 28.0
    """The sharpest sampled frame's variance of the Laplacian under this: ``blurred``."""
    frozen_diff: float = 0.4
    """Consecutive sampled frames differing by less than this (median over the pairs of their mean absolute
    grey-level difference): ``frozen``."""
    min_decoded_share: float = 0.9
    """Fewer of the frames the container promises decoding than this share: ``undecodable`` (cut short)."""


@dataclass(frozen=True)
class Retry:
    attempts: int = 5
    initial_s: float = 0.5
    max_s: float = 30.0


DEFAULT_INHIBIT = (InhibitRule((Matcher("kind", "recognizer_degraded"),), (Matcher("device_ip", ".+", True),),
                               ("recognizer_ip",)),)
"""A recogniser alert mutes the alerts of its own devices (the root cause, not the symptoms)."""


@dataclass(frozen=True)
class MonitoringConfig:
    evaluation_interval_s: float = 5.0
    rules: tuple[Rule, ...] = ()
    route: Route = field(default_factory=Route)
    receivers: tuple[Receiver, ...] = ()
    inhibit_rules: tuple[InhibitRule, ...] = DEFAULT_INHIBIT
    health: Health = field(default_factory=Health)
    images: Images = field(default_factory=Images)
    video: Video = field(default_factory=Video)
    retry: Retry = field(default_factory=Retry)
    group_id: str = "monitoring"
    metrics_port: int = 9310
    metrics_host: str = "127.0.0.1"
    """The address /metrics binds (the host's own, or 0.0.0.0, when Prometheus scrapes it from another host)."""
    flush_interval_s: float = 2.0
    external_url: str = ""
    lock_session_s: float = 10.0
    """How long a dead active monitor holds the single-monitor lock before a standby takes over (the lock
    group's ``session.timeout.ms``; the broker refuses less than ``group.min.session.timeout.ms``, 6 s)."""


def _number(where: str, key: str, value: Any, minimum: float = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < minimum:
        raise ConfigError(f"{where}: field {key!r} should be a number >= {minimum}, not {value!r}")
    return float(value)


def _text(where: str, key: str, value: Any, choices: tuple[str, ...] | None = None) -> str:
    if not isinstance(value, str) or not value or (choices and value not in choices):
        wanted = f"one of {', '.join(choices)}" if choices else "a non-empty string"
        raise ConfigError(f"{where}: field {key!r} should be {wanted}, not {value!r}")
    return value


def _strings(where: str, key: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f"{where}: field {key!r} should be a list of strings, not {value!r}")
    return tuple(value)


def _known(where: str, table: Mapping[str, Any], keys: set[str]) -> None:
    unknown = sorted(set(table) - keys)
    if unknown:
        raise ConfigError(f"{where}: unknown field {unknown[0]!r} (known: {', '.join(sorted(keys))})")


def _rule(index: int, raw: Any) -> Rule:
    where = f"monitoring.rules[{index}]"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: should be a table")
    name = _text(where, "name", raw.get("name"))
    where = f"rule {name!r} ({where})"
    _known(where, raw, {"name", "kind", "threshold", "for_s", "keep_firing_for_s", "severity", "stage", "group",
                        "summary"})
    kind = _text(where, "kind", raw.get("kind"), KINDS)
    if "threshold" not in raw:
        raise ConfigError(f"{where}: field 'threshold' is missing")
    threshold = _number(where, "threshold", raw["threshold"])
    if kind in SHARE_KINDS and threshold > 1:
        raise ConfigError(f"{where}: field 'threshold' is a share 0..1 for {kind}, not {threshold}")
    if kind == "video_quality" and (threshold < 1 or threshold != int(threshold)):
        raise ConfigError(f"{where}: field 'threshold' is a number of segments >= 1 for {kind}, not {threshold}")
    return Rule(name, kind, threshold, _number(where, "for_s", raw.get("for_s", 0)),
                _number(where, "keep_firing_for_s", raw.get("keep_firing_for_s", 0)),
                _text(where, "severity", raw.get("severity", "warning"), SEVERITIES),
                _text(where, "stage", raw.get("stage", "capture_to_ingest"), STAGES),
                str(raw.get("group", "")), str(raw.get("summary", "")))


def _receiver(index: int, raw: Any) -> Receiver:
    where = f"monitoring.receivers[{index}]"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: should be a table")
    name = _text(where, "name", raw.get("name"))
    where = f"receiver {name!r} ({where})"
    kind = _text(where, "type", raw.get("type"), RECEIVER_TYPES)
    if kind == ALERTMANAGER:
        _known(where, raw, {"name", "type", "url", "timeout_s", "resend_s"})
        return Receiver(name, kind, url=alertmanager_url(where, raw.get("url")),
                        timeout_s=_number(where, "timeout_s", raw.get("timeout_s", 5.0), 0.1),
                        resend_s=_number(where, "resend_s", raw.get("resend_s", 60.0), 0.1))
    _known(where, raw, {"name", "type", "url", "host", "port", "from", "to", "timeout_s", "send_resolved"})
    timeout = _number(where, "timeout_s", raw.get("timeout_s", 5.0), 0.1)
    send_resolved = raw.get("send_resolved", True)
    if not isinstance(send_resolved, bool):
        raise ConfigError(f"{where}: field 'send_resolved' should be true or false")
    if kind == "webhook":
        url = _text(where, "url", raw.get("url"))
        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"{where}: field 'url' should be an http(s) URL, not {url!r}")
        return Receiver(name, kind, url=url, timeout_s=timeout, send_resolved=send_resolved)
    port = raw.get("port", 25)
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise ConfigError(f"{where}: field 'port' should be a TCP port, not {port!r}")
    return Receiver(name, kind, host=_text(where, "host", raw.get("host")), port=port,
                    from_addr=_text(where, "from", raw.get("from")), to=_strings(where, "to", raw.get("to")),
                    timeout_s=timeout, send_resolved=send_resolved)


def alertmanager_url(where: str, url: Any) -> str:
    """Alertmanager's base address ``http(s)://host:port[/prefix]`` (the monitor adds ``/api/v2/alerts``)."""
    url = _text(where, "url", url)
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ConfigError(f"{where}: field 'url' is not a URL ({exc}): {url!r}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or port == 0:
        raise ConfigError(f"{where}: field 'url' should be Alertmanager's base address http(s)://host:port, "
                          f"not {url!r}")
    if parts.query or parts.fragment or "/api/" in parts.path + "/":
        raise ConfigError(f"{where}: field 'url' should be Alertmanager's base address such as "
                          f"http://127.0.0.1:9093 (the monitor adds /api/v2/alerts), not {url!r}")
    return url.rstrip("/")


def console_alertmanager_url(section: Mapping[str, Any]) -> str:
    """The first ``alertmanager`` receiver's address in a raw ``[monitoring]`` table, or "" (for the console,
    which must start even when the monitor's config has a mistake elsewhere)."""
    receivers = section.get("receivers", [])
    for raw in receivers if isinstance(receivers, list) else []:
        if isinstance(raw, dict) and raw.get("type") == ALERTMANAGER and isinstance(raw.get("url"), str):
            return raw["url"].rstrip("/")
    return ""


def _inhibit(index: int, raw: Any) -> InhibitRule:
    where = f"monitoring.inhibit_rules[{index}]"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: should be a table")
    _known(where, raw, {"source_matchers", "target_matchers", "equal"})
    try:
        source = tuple(Matcher.parse(m) for m in _strings(where, "source_matchers", raw.get("source_matchers", [])))
        target = tuple(Matcher.parse(m) for m in _strings(where, "target_matchers", raw.get("target_matchers", [])))
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    return InhibitRule(source, target, _strings(where, "equal", raw.get("equal", [])))


def _route(raw: Any, receivers: tuple[Receiver, ...]) -> Route:
    where = "monitoring.route"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: should be a table")
    _known(where, raw, {"group_by", "group_wait_s", "group_interval_s", "repeat_interval_s", "receivers"})
    names = _strings(where, "receivers", raw.get("receivers", []))
    known = {r.name for r in receivers}
    external = {r.name for r in receivers if r.type == ALERTMANAGER}
    for name in names:
        if name not in known:
            raise ConfigError(f"{where}: field 'receivers' names {name!r}, which no [[monitoring.receivers]] defines")
        if name in external:
            raise ConfigError(f"{where}: field 'receivers' names {name!r}, an alertmanager receiver: it gets every "
                              "alert and routes them itself (the route is the built-in receivers')")
    return Route(_strings(where, "group_by", raw.get("group_by", ["alertname"])),
                 _number(where, "group_wait_s", raw.get("group_wait_s", 10.0)),
                 _number(where, "group_interval_s", raw.get("group_interval_s", 60.0), 0.1),
                 _number(where, "repeat_interval_s", raw.get("repeat_interval_s", 4 * 3600.0), 0.1), names)


def _health(raw: Any) -> Health:
    where = "monitoring.health"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: should be a table")
    _known(where, raw, set(Health.__dataclass_fields__))
    defaults = Health()
    values = {key: _number(where, key, raw.get(key, getattr(defaults, key))) for key in Health.__dataclass_fields__}
    values["min_records"] = int(values["min_records"])
    for key in ("degraded_share", "recognizer_share"):
        if values[key] > 1:
            raise ConfigError(f"{where}: field {key!r} is a share 0..1, not {values[key]}")
    return Health(**values)


def _images(raw: Any) -> Images:
    where = "monitoring.images"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: should be a table")
    _known(where, raw, set(Images.__dataclass_fields__))
    defaults = Images()
    enabled = raw.get("enabled", defaults.enabled)
    if not isinstance(enabled, bool):
        raise ConfigError(f"{where}: field 'enabled' should be true or false, not {enabled!r}")
    minimum = {"max_per_s": 0.01, "window_s": 1.0, "min_images": 1, "max_bytes": 1024}
    values: dict[str, Any] = {key: _number(where, key, raw.get(key, getattr(defaults, key)), minimum.get(key, 0.0))
                              for key in Images.__dataclass_fields__ if key != "enabled"}
    for key in ("sample_share", "degraded_share"):
        if values[key] > 1:
            raise ConfigError(f"{where}: field {key!r} is a share 0..1, not {values[key]}")
    if values["black_luminance"] > 255:
        raise ConfigError(f"{where}: field 'black_luminance' is a luminance 0..255, not {values['black_luminance']}")
    for key in ("min_images", "max_bytes"):
        values[key] = int(values[key])
    return Images(enabled=enabled, **values)


def _video(raw: Any) -> Video:
    where = "monitoring.video"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: should be a table")
    _known(where, raw, set(Video.__dataclass_fields__))
    defaults = Video()
    enabled = raw.get("enabled", defaults.enabled)
    if not isinstance(enabled, bool):
        raise ConfigError(f"{where}: field 'enabled' should be true or false, not {enabled!r}")
    minimum = {"interval_s": 0.1, "segment_s": 1.0, "gap_factor": 1.0, "max_per_interval": 1, "bad_segments": 1,
               "max_bytes": 1024, "frames_sampled": 2}
    values: dict[str, Any] = {key: _number(where, key, raw.get(key, getattr(defaults, key)), minimum.get(key, 0.0))
                              for key in Video.__dataclass_fields__ if key != "enabled"}
    for key in ("black_luminance", "frozen_diff"):
        if values[key] > 255:
            raise ConfigError(f"{where}: field {key!r} is a grey level 0..255, not {values[key]}")
    if values["min_decoded_share"] > 1:
        raise ConfigError(f"{where}: field 'min_decoded_share' is a share 0..1, not {values['min_decoded_share']}")
    for key in ("max_per_interval", "bad_segments", "max_bytes", "frames_sampled"):
        if values[key] != int(values[key]):
            raise ConfigError(f"{where}: field {key!r} should be a whole number, not {raw.get(key)!r}")
        values[key] = int(values[key])
    return Video(enabled=enabled, **values)


def _retry(raw: Any) -> Retry:
    where = "monitoring.retry"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: should be a table")
    _known(where, raw, {"attempts", "initial_s", "max_s"})
    return Retry(int(_number(where, "attempts", raw.get("attempts", 5), 1)),
                 _number(where, "initial_s", raw.get("initial_s", 0.5)),
                 _number(where, "max_s", raw.get("max_s", 30.0)))


def parse(section: Mapping[str, Any]) -> MonitoringConfig:
    """The ``[monitoring]`` table as a :class:`MonitoringConfig`; raises :class:`ConfigError`."""
    _known("monitoring", section, {"evaluation_interval_s", "rules", "route", "receivers", "inhibit_rules", "health",
                                   "images", "video", "retry", "group_id", "metrics_port", "metrics_host",
                                   "flush_interval_s", "external_url", "lock_session_s"})
    rules_raw = section.get("rules", [])
    receivers_raw = section.get("receivers", [])
    for key, value in (("rules", rules_raw), ("receivers", receivers_raw)):
        if not isinstance(value, list):
            raise ConfigError(f"monitoring.{key}: should be an array of tables ([[monitoring.{key}]])")
    rules = tuple(_rule(i, raw) for i, raw in enumerate(rules_raw))
    _unique("rule", [r.name for r in rules])
    receivers = tuple(_receiver(i, raw) for i, raw in enumerate(receivers_raw))
    _unique("receiver", [r.name for r in receivers])
    inhibit_raw = section.get("inhibit_rules")
    inhibit = DEFAULT_INHIBIT if inhibit_raw is None else tuple(_inhibit(i, raw) for i, raw in enumerate(inhibit_raw))
    port = section.get("metrics_port", 9310)
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port < 65536:
        raise ConfigError(f"monitoring: field 'metrics_port' should be a TCP port (0: none), not {port!r}")
    return MonitoringConfig(
        evaluation_interval_s=_number("monitoring", "evaluation_interval_s", section.get("evaluation_interval_s", 5.0),
                                      0.1),
        rules=rules, route=_route(section.get("route", {}), receivers), receivers=receivers, inhibit_rules=inhibit,
        health=_health(section.get("health", {})), images=_images(section.get("images", {})),
        video=_video(section.get("video", {})),
        retry=_retry(section.get("retry", {})),
        group_id=_text("monitoring", "group_id", section.get("group_id", "monitoring")), metrics_port=port,
        metrics_host=_text("monitoring", "metrics_host", section.get("metrics_host", "127.0.0.1")),
        flush_interval_s=_number("monitoring", "flush_interval_s", section.get("flush_interval_s", 2.0), 0.1),
        external_url=str(section.get("external_url", "")),
        lock_session_s=_number("monitoring", "lock_session_s", section.get("lock_session_s", 10.0), 1.0))


def _unique(what: str, names: list[str]) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ConfigError(f"{what} {name!r}: field 'name' is used twice")
        seen.add(name)


def load(config: Config) -> MonitoringConfig:
    return parse(config.section("monitoring"))
