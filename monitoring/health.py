"""Device health from counts: what devices say they produced against what the ingest job found valid.

Heartbeats carry cumulative ``produced`` counters; ``ingest.stats`` carries per-device valid /
unrecognised / invalid counts per micro-batch. Over a window of ``window_s`` ending at the newest
heartbeat whose records have had ``ingest_delay_s`` to reach ``ingest.stats``, a device's *bad
share* is the larger of

* unreadable-or-lost: ``1 - valid / produced`` (blurred images, records that never arrived), and
* missing: ``1 - produced / expected``, where expected is the device's usual share of its kind's
  traffic (learnt while healthy) times what its peers produced: a blocked camera that produces
  nothing while its neighbours are busy is found even though it keeps reporting.

States: *silent* (no heartbeat for ``silent_after_s``), *degraded* (bad share at or above
``degraded_share``), *recovering* (good again, for ``recovery_s``), *healthy*. Nothing here trusts
what a device says of its own status. Replayed input is recognised (heartbeats by time, ingest
batches by job and batch id) and counted once.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from contracts.ingest_stats import IngestStats, LatencyHistogram

from .config import Health
from .locator import Location, Locator

HEALTHY, DEGRADED, SILENT, RECOVERING = "healthy", "degraded", "silent", "recovering"
STATES = (HEALTHY, DEGRADED, SILENT, RECOVERING)
_SHARE_ALPHA = 0.2


@dataclass
class Beat:
    t: float
    produced: int
    unrecognized: int


@dataclass
class DeviceTrack:
    device_ip: str
    recognizer_ip: str = ""
    checkpoint_id: str = ""
    topic: str = ""
    beats: deque[Beat] = field(default_factory=deque)
    counts: deque[tuple[float, int, int, int]] = field(default_factory=deque)
    """(ingest.stats time, valid, unrecognized, invalid)."""
    state: str = HEALTHY
    since: float = 0.0
    share: float | None = None
    bad: float | None = None
    window: dict[str, float] = field(default_factory=dict)

    @property
    def last_seen(self) -> float | None:
        return self.beats[-1].t if self.beats else None

    def to_json(self) -> dict[str, Any]:
        last = self.beats[-1] if self.beats else None
        return {"device_ip": self.device_ip, "recognizer_ip": self.recognizer_ip, "checkpoint_id": self.checkpoint_id,
                "topic": self.topic, "state": self.state, "since": self.since, "share": self.share, "bad": self.bad,
                "last_seen": last.t if last else None, "produced": last.produced if last else None,
                "unrecognized": last.unrecognized if last else None, "window": self.window}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> DeviceTrack:
        track = cls(data["device_ip"], data["recognizer_ip"], data["checkpoint_id"], data["topic"],
                    state=data["state"], since=data["since"], share=data["share"], bad=data["bad"],
                    window=data.get("window", {}))
        if data.get("last_seen") is not None:
            track.beats.append(Beat(data["last_seen"], data["produced"], data["unrecognized"]))
        return track


@dataclass(frozen=True)
class Delta:
    """What one new heartbeat adds to the series."""

    produced: int
    unrecognized: int


class Fleet:
    """Every device's recent heartbeats and counts, the latency window, and the judged states."""

    def __init__(self, health: Health, locator: Locator, started_at: float) -> None:
        self.health = health
        self.locator = locator
        self.started_at = started_at
        self.live_since: float | None = started_at
        """Since when the monitor reads its input up to date (None: not now, e.g. rejoining its group).
        Silence is only judged while live, and never counted from before: a monitor that was down or
        rebalancing must not take its own deafness for devices falling silent."""
        self.devices: dict[str, DeviceTrack] = {}
        self.jobs: dict[str, tuple[int, float]] = {}
        """Per ingest job: (last batch id, its time), to skip replays."""
        self.latest_stats_t: float | None = None
        self.latency: deque[tuple[float, dict[str, LatencyHistogram]]] = deque()
        self.dirty: set[str] = set()

    def track(self, device_ip: str) -> DeviceTrack:
        track = self.devices.get(device_ip)
        if track is None:
            track = self.devices[device_ip] = DeviceTrack(device_ip, since=self.started_at)
        return track

    def heartbeat(self, device_ip: str, recognizer_ip: str, checkpoint_id: str, topic: str, t: float,
                  produced: int, unrecognized: int) -> Delta | None:
        """Take one heartbeat; None when it is a replay (not newer than the last one seen)."""
        track = self.track(device_ip)
        last = track.beats[-1] if track.beats else None
        if last is not None and t <= last.t:
            return None
        track.recognizer_ip, track.checkpoint_id, track.topic = recognizer_ip, checkpoint_id, topic
        reset = last is None or produced < last.produced or unrecognized < last.unrecognized
        delta = Delta(produced, unrecognized) if reset else Delta(produced - last.produced,
                                                                  unrecognized - last.unrecognized)
        track.beats.append(Beat(t, produced, unrecognized))
        self.dirty.add(device_ip)
        return delta

    def is_replay(self, stats: IngestStats, t: float) -> bool:
        """Already counted: the same batch again, or an older one that is not from a restarted job."""
        last = self.jobs.get(stats.job)
        new = last is None or stats.batch_id > last[0] or (stats.batch_id < last[0] and t > last[1])
        return not new

    def ingest_stats(self, stats: IngestStats, t: float) -> None:
        self.jobs[stats.job] = (stats.batch_id, t)
        self.latest_stats_t = t if self.latest_stats_t is None else max(self.latest_stats_t, t)
        self.latency.append((t, stats.latency))
        for d in stats.devices:
            track = self.track(d.device_ip)
            if not track.recognizer_ip:
                track.recognizer_ip, track.checkpoint_id, track.topic = d.recognizer_ip, d.checkpoint_id, d.topic
            track.counts.append((t, d.valid, d.unrecognized, d.invalid))

    def latency_window(self, stage: str, now: float) -> LatencyHistogram:
        merged = LatencyHistogram()
        for t, histograms in self.latency:
            if t > now - self.health.window_s and stage in histograms:
                merged.merge(histograms[stage])
        return merged

    def produced_since(self, t: float) -> int:
        """Records devices reported producing after ``t`` (is there anything for the ingest job to do?)."""
        total = 0
        for track in self.devices.values():
            before = [b for b in track.beats if b.t <= t]
            if before and track.beats[-1].t > t:
                total += max(0, track.beats[-1].produced - before[-1].produced)
        return total

    def silent_for(self, track: DeviceTrack, now: float) -> float:
        """Seconds the monitor has been live without hearing from the device (0 while not live)."""
        if self.live_since is None:
            return 0.0
        return now - max(track.last_seen or self.live_since, self.live_since)

    def location(self, track: DeviceTrack) -> Location:
        return self.locator.locate(track.device_ip, track.recognizer_ip, track.checkpoint_id)

    def judge(self, now: float) -> None:
        """Measure every device over the window and move its state; trims what the window no longer needs."""
        for ip in self.locator.devices():
            if ip not in self.devices:
                location = self.locator.locate(ip)
                self.devices[ip] = DeviceTrack(ip, location.recognizer_ip, location.checkpoint_id,
                                               since=self.started_at)
        self._trim(now)
        windows = {ip: self._window(track) for ip, track in self.devices.items()}
        topic_rate: dict[str, float] = {}
        for ip, window in windows.items():
            if window is not None:
                topic = self.devices[ip].topic
                topic_rate[topic] = topic_rate.get(topic, 0.0) + window["produced"] / window["span"]
        for ip, track in self.devices.items():
            self._judge_one(track, windows[ip], topic_rate.get(track.topic, 0.0), now)

    def _trim(self, now: float) -> None:
        keep_from = now - 3 * self.health.window_s - self.health.ingest_delay_s
        for track in self.devices.values():
            while len(track.beats) > 1 and track.beats[1].t < keep_from:
                track.beats.popleft()
            while track.counts and track.counts[0][0] < keep_from:
                track.counts.popleft()
        while self.latency and self.latency[0][0] < now - self.health.window_s:
            self.latency.popleft()

    def _window(self, track: DeviceTrack) -> dict[str, float] | None:
        delay, span = self.health.ingest_delay_s, self.health.window_s
        if self.latest_stats_t is None:
            return None
        usable = [b for b in track.beats if b.t + delay <= self.latest_stats_t]
        if len(usable) < 2:
            return None
        end = usable[-1]
        older = [b for b in usable if b.t <= end.t - span]
        start = older[-1] if older else usable[0]
        if end.t - start.t < span / 2:
            return None
        produced = end.produced - start.produced if end.produced >= start.produced else end.produced
        valid = unrecognized = invalid = 0
        for t, v, u, i in track.counts:
            if start.t + delay < t <= end.t + delay:
                valid, unrecognized, invalid = valid + v, unrecognized + u, invalid + i
        return {"span": end.t - start.t, "produced": produced, "valid": valid, "unrecognized": unrecognized,
                "invalid": invalid}

    def _judge_one(self, track: DeviceTrack, window: dict[str, float] | None, topic_rate: float, now: float) -> None:
        h = self.health
        bad = track.bad  # no window (just started, ingest lagging): the last judgement stands
        if window is not None:
            bad = None
            track.window = window
            produced = window["produced"]
            if produced >= h.min_records:
                bad = min(1.0, max(0.0, 1.0 - window["valid"] / produced))
            if track.share is not None:
                expected = track.share * topic_rate * window["span"]
                if expected >= h.min_records:
                    bad = max(bad or 0.0, min(1.0, max(0.0, 1.0 - produced / expected)))
        track.bad = bad
        if self.silent_for(track, now) >= h.silent_after_s:
            state = SILENT
        elif bad is not None and bad >= h.degraded_share:
            state = DEGRADED
        elif track.state == SILENT:
            heard = track.last_seen is not None and track.last_seen > track.since
            state = RECOVERING if heard else SILENT  # quiet only because the monitor just (re)started
        elif track.state == DEGRADED:
            state = RECOVERING if bad is not None else DEGRADED
        elif track.state == RECOVERING and now - track.since < h.recovery_s:
            state = RECOVERING
        else:
            state = HEALTHY
        if state != track.state:
            track.state, track.since = state, now
            self.dirty.add(track.device_ip)
        if state == HEALTHY and window is not None and topic_rate > 0 and bad is not None:
            share = window["produced"] / window["span"] / topic_rate
            track.share = share if track.share is None else track.share + _SHARE_ALPHA * (share - track.share)
            self.dirty.add(track.device_ip)

    def unhealthy_share(self) -> dict[str, tuple[int, int, list[str]]]:
        """Per recogniser: (devices, unhealthy devices, their ips)."""
        out: dict[str, tuple[int, int, list[str]]] = {}
        for track in self.devices.values():
            recognizer = self.location(track).recognizer_ip
            total, bad, ips = out.get(recognizer, (0, 0, []))
            unhealthy = track.state in (DEGRADED, SILENT)
            out[recognizer] = (total + 1, bad + unhealthy, [*ips, track.device_ip] if unhealthy else ips)
        return out
