"""What each rule kind finds active in the fleet's measurements: the candidates of one evaluation.

Labels follow the Interface section of issue 11: ``alertname`` (the rule's name), ``severity``,
``kind`` (the rule kind: a stable hook for inhibition and silences whatever the rules are called),
and for device alerts ``device_ip``, ``recognizer_ip``, ``district``, ``checkpoint_id``,
``crossroad``; a recogniser alert has ``recognizer_ip`` and no ``device_ip``. Values that change
every evaluation (shares, seconds) go to annotations, never labels, so the fingerprint stays stable.

Annotations keep English ``summary``/``description`` (what Alertmanager receivers, mail and chat read)
and add ``summary_key`` (a console catalog key, ``alert.summary.<kind>``) with ``summary_params`` (a
JSON object of the values its ``{placeholders}`` take), so the console shows the summary in its own
language without parsing English. A rule's own ``summary`` in the config replaces the English text
only: the operator wrote it for the receivers.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from .alerts import Candidate
from .config import Rule
from .health import DEGRADED, SILENT, VIDEO, DeviceTrack, Fleet
from .image_judge import BAD
from .video_health import GAP

LagOf = Callable[[str], int | None]
"""Records a consumer group is behind on its topics (None when unknown)."""


def _base(rule: Rule) -> dict[str, str]:
    return {"alertname": rule.name, "severity": rule.severity, "kind": rule.kind}


def summary_annotations(rule: Rule, english: str, description: str, **params: object) -> dict[str, str]:
    """The summary in English for receivers, and as catalog key + parameters for the console."""
    return {"summary": rule.summary or english, "description": description,
            "summary_key": f"alert.summary.{rule.kind}",
            "summary_params": json.dumps({k: str(v) for k, v in params.items()}, ensure_ascii=False, sort_keys=True)}


def _device(rule: Rule, fleet: Fleet, track: DeviceTrack, summary: str, value: str, **params: object) -> Candidate:
    where = fleet.location(track)
    labels = {**_base(rule), "device_ip": track.device_ip, "recognizer_ip": where.recognizer_ip,
              "district": where.district, "checkpoint_id": where.checkpoint_id, "crossroad": where.crossroad}
    described = f"{summary} at {where.describe()}"
    annotations = {**summary_annotations(rule, summary, described, device_ip=track.device_ip, **params),
                   "value": value, "location": where.describe(), "direction": where.direction,
                   "lat": "" if where.lat is None else str(where.lat),
                   "lon": "" if where.lon is None else str(where.lon),
                   "state": track.state}
    return Candidate(labels, annotations)


def device_quality(rule: Rule, fleet: Fleet, now: float) -> list[Candidate]:
    out = []
    for track in fleet.devices.values():
        if track.bad is not None and track.bad >= rule.threshold and track.state != SILENT:
            summary = f"device {track.device_ip}: {track.bad:.0%} of its records unreadable or missing"
            out.append(_device(rule, fleet, track, summary, f"{track.bad:.3f}", share=f"{track.bad:.0%}"))
    return out


def capture_images(rule: Rule, fleet: Fleet, now: float) -> list[Candidate]:
    """Devices whose sampled capture images are missing, undecodable or black too often (issue 28): the same
    device labels as every device alert, so grouping, inhibition by its recogniser and the map work alike."""
    out = []
    since = now - fleet.images.window_s
    for track in fleet.devices.values():
        share = track.images_bad
        if share is not None and share >= rule.threshold and track.state != SILENT:
            counts = track.images.counts(since)
            checked = sum(counts.values())
            found = ", ".join(f"{result} {counts[result]}" for result in sorted(counts) if result in BAD)
            summary = f"device {track.device_ip}: {share:.0%} of {checked} sampled capture images bad ({found})"
            candidate = _device(rule, fleet, track, summary, f"{share:.3f}", share=f"{share:.0%}", checked=checked,
                                found=found)
            candidate.annotations["reason"] = track.reason
            out.append(candidate)
    return out


def video_gap(rule: Rule, fleet: Fleet, now: float) -> list[Candidate]:
    """Cameras whose schedule has a gap (silent: no new segment for ``gap_factor * segment_s``) that has lasted
    ``threshold`` seconds since their newest segment began; labelled like every device alert, plus ``problem``."""
    out = []
    for track in fleet.devices.values():
        if not (track.camera and track.state == SILENT and track.video_problem == GAP):
            continue
        age = track.video.age(now, track.watched_since)
        if age >= rule.threshold:
            newest = "no segment seen" if track.video.newest is None else f"newest segment began {age:.0f} s ago"
            summary = f"camera {track.device_ip}: no new video segment uploaded ({newest})"
            candidate = _device(rule, fleet, track, summary, f"{age:.0f}", seconds=f"{age:.0f}")
            candidate.labels["problem"] = GAP
            out.append(candidate)
    return out


def video_quality(rule: Rule, fleet: Fleet, now: float) -> list[Candidate]:
    """Cameras degraded by their footage (reason ``video``): the newest ``threshold`` judged segments in a row were
    undecodable, black, blurred or frozen. ``problem`` (a label) is the newest one's."""
    out = []
    for track in fleet.devices.values():
        problem, streak = track.video_problem, track.video.bad_streak()
        if not (track.camera and track.state == DEGRADED and VIDEO in track.reason.split(",") and problem
                and problem != GAP and streak >= rule.threshold):
            continue
        summary = f"camera {track.device_ip}: footage {problem} in its last {streak} checked segments"
        candidate = _device(rule, fleet, track, summary, str(streak), problem=problem, segments=streak)
        candidate.labels["problem"] = problem
        candidate.annotations["reason"] = track.reason
        out.append(candidate)
    return out


def device_silent(rule: Rule, fleet: Fleet, now: float) -> list[Candidate]:
    out = []
    for track in fleet.devices.values():
        silent = fleet.silent_for(track, now)
        if silent >= rule.threshold:
            out.append(_device(rule, fleet, track, f"device {track.device_ip}: no heartbeat for {silent:.0f} s",
                               f"{silent:.0f}", seconds=f"{silent:.0f}"))
    return out


def recognizer_degraded(rule: Rule, fleet: Fleet, now: float) -> list[Candidate]:
    out = []
    for recognizer, (total, bad, ips) in fleet.unhealthy_share().items():
        if bad >= 2 and bad / total >= rule.threshold:
            summary = f"recognition server {recognizer}: {bad} of its {total} devices degraded or silent"
            out.append(Candidate({**_base(rule), "recognizer_ip": recognizer},
                                 {**summary_annotations(rule, summary, summary, recognizer_ip=recognizer, bad=bad,
                                                        total=total),
                                  "value": f"{bad / total:.3f}", "devices": ",".join(sorted(ips))}))
    return out


def latency_p99(rule: Rule, fleet: Fleet, now: float) -> list[Candidate]:
    p99 = fleet.latency_window(rule.stage, now).percentile(99)
    if p99 is None or p99 <= rule.threshold:
        return []
    summary = f"{rule.stage} latency p99 {p99} ms above {rule.threshold:.0f} ms"
    return [Candidate({**_base(rule), "stage": rule.stage},
                      {**summary_annotations(rule, summary, summary, stage=rule.stage, p99=p99,
                                             threshold=f"{rule.threshold:.0f}"),
                       "value": str(p99)})]


def ingest_stalled(rule: Rule, fleet: Fleet, now: float) -> list[Candidate]:
    """The ingest is behind by ``threshold`` seconds while devices produce: no ``ingest.stats`` at all, or
    batches whose freshest record was read that late (a backlog). One alert for the ingest, where device
    quality holds its judgement instead of blaming every device for records not read yet."""
    if fleet.live_since is None:
        return []
    behind = fleet.ingest_behind(now)
    if behind is None:  # no batch known at all (none read, none persisted): count from when reading began, or
        # from when the first device was heard if later: devices that came online a moment ago while the job runs
        # its first batch (`make up` starts them once the job runs, minutes after the monitor) are not a stall
        heard = fleet.first_heard()
        behind = now - max(fleet.live_since, heard if heard is not None else now)
    position = fleet.positions[-1][1] if fleet.positions else fleet.live_since
    waiting = fleet.produced_since(position)
    if behind < rule.threshold or waiting <= 0:
        return []
    summary = f"ingest {behind:.0f} s behind while devices produced {waiting} records it has not read"
    params = {"seconds": f"{behind:.0f}", "waiting": waiting}
    return [Candidate(_base(rule), {**summary_annotations(rule, summary, summary, **params),
                                    "value": f"{behind:.0f}"})]


def consumer_lag(rule: Rule, lag_of: LagOf) -> list[Candidate]:
    group = rule.group or "monitoring"
    lag = lag_of(group)
    if lag is None or lag <= rule.threshold:
        return []
    summary = f"consumer group {group} is {lag} records behind"
    return [Candidate({**_base(rule), "group": group}, {**summary_annotations(rule, summary, summary, group=group,
                                                                              lag=lag),
                                                        "value": str(lag)})]


FLEET_RULES = {"device_quality": device_quality, "device_silent": device_silent,
               "recognizer_degraded": recognizer_degraded, "latency_p99": latency_p99,
               "ingest_stalled": ingest_stalled, "capture_images": capture_images, "video_gap": video_gap,
               "video_quality": video_quality}


def candidates(rule: Rule, fleet: Fleet, lag_of: LagOf, now: float) -> list[Candidate]:
    if rule.kind == "consumer_lag":
        return consumer_lag(rule, lag_of)
    return FLEET_RULES[rule.kind](rule, fleet, now)
