"""Device health from counts: what devices say they produced against what the ingest job found valid.

Heartbeats carry cumulative ``produced`` counters; ``ingest.stats`` carries per-device valid /
unrecognised / invalid counts per micro-batch. A device's *bad share* is the largest of

* unreadable: ``1 - valid / read`` over the records the ingest read in the last ``window_s`` (blurred
  images); it needs no completeness, so it is judged even while the ingest lags;
* lost: ``1 - valid / produced`` over a window of the ingest's *position* (how far in bus time it has
  read: a batch's time minus the smallest ``bus_to_read`` latency in it, i.e. its freshest record),
  between two batch positions ``window_s`` apart, against what the heartbeats say was produced
  between those two instants. The window only ends where the ingest has already read, so the
  judgement waits for the data instead of assuming a fixed delay, and a slow or catching-up ingest
  changes nothing. While the ingest is behind by more than ``window_s`` (no stats, or stats whose
  records were read minutes late) this share holds its last value: the ingest-level rule speaks,
  no device is blamed for records that are merely not read yet, and none is cleared either;
* missing: ``1 - produced / expected``, where expected is the device's usual share of its kind's
  traffic (learnt while healthy) times what its peers produced, from heartbeats alone (ingest lag
  cannot touch it): a blocked camera that produces nothing while its neighbours are busy is found
  even though it keeps reporting.

A device is also judged by its capture images (issue 28): the monitor samples records and decodes their
images (:mod:`monitoring.image_sampler`); the share of them missing, undecodable or black over
``[monitoring.images] window_s`` of capture time (:mod:`monitoring.image_health`) degrades the device at
``[monitoring.images] degraded_share``. A degraded device's ``reason`` says which judgement put it there
(``records``, ``images`` or both); it leaves *degraded* only once each of those judges it good again.

Cameras (issue 28, the video half) are devices too: the deployment map's devices of kind ``video`` and any camera
whose segments the monitor finds in the ``videos`` bucket (:mod:`monitoring.video_watch`; its ``device_ip`` is the
camera id, located by the map like any device). A camera sends no heartbeat: its schedule stands for them. A camera
whose newest segment began more than ``[monitoring.video] gap_factor * segment_s`` ago is *silent* with problem
``gap``: to an operator it is what a capture device that stops sending is, the same state on the map and under its
recogniser, and a gap is not a quality the camera has but the absence of footage to have one. A camera whose newest
``bad_segments`` judged segments are all bad (:mod:`monitoring.video_judge`: ``undecodable``, ``black``,
``blurred``, ``frozen``) is *degraded* with reason ``video``, the newest one's result as its ``video_problem``
(:mod:`monitoring.video_health`); one good segment clears it.

States: *silent* (no heartbeat for ``silent_after_s``), *degraded* (bad share at or above
``degraded_share``), *recovering* (good again, for ``recovery_s``), *healthy*. Nothing here trusts
what a device says of its own status. Replayed input is recognised (heartbeats by time, ingest
batches by job and batch id) and counted once.

Time since a device's last heartbeat and since the ingest's last batch are measured from those
records themselves, never from when this monitor (re)started: the monitor resumes its topics from
the committed offsets and judges only once it has caught up, so by then it has read every heartbeat
and batch there was, also those of its own downtime. What it knew before is persisted (a device's
last heartbeat, when it was first expected, a job's last batch and position), so a restart or a
standby's takeover judges every device as the previous monitor did.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from contracts.ingest_stats import IngestStats, LatencyHistogram

from .config import Health, Images, Video
from .image_health import ImageWindow
from .locator import Location, Locator
from .video_health import GAP, VideoWindow

HEALTHY, DEGRADED, SILENT, RECOVERING = "healthy", "degraded", "silent", "recovering"
RECORDS, IMAGES, VIDEO = "records", "images", "video"
"""A degraded device's reasons: too many of its records lost or unreadable; too many of its images bad; its newest
video segments bad (a camera)."""
CAMERA_KIND = "video"
"""The deployment map's kind of a camera whose footage lands in the ``videos`` bucket."""
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
    counts: deque[tuple[float, float, int, int, int]] = field(default_factory=deque)
    """(ingest.stats time, the ingest position it reached, valid, unrecognized, invalid)."""
    state: str = HEALTHY
    since: float = 0.0
    watched_since: float = 0.0
    """When the monitor first expected this device's heartbeats (the map or a batch named it): its silence
    counts from there while it has never been heard."""
    share: float | None = None
    bad: float | None = None
    lost: float | None = None
    """The last lost share judged on a completely read window (held while the ingest lags)."""
    window: dict[str, float] = field(default_factory=dict)
    images: ImageWindow = field(default_factory=ImageWindow)
    images_bad: float | None = None
    """Share of its sampled images judged bad over the images window (None: too few sampled)."""
    reason: str = ""
    """Why it is (or, while recovering, was) degraded: ``records``, ``images``, ``video``, comma-joined."""
    camera: bool = False
    """A video camera: judged by its segments' schedule and footage, never by heartbeats."""
    video: VideoWindow = field(default_factory=VideoWindow)
    video_problem: str = ""
    """What is (or, while recovering, was) wrong with a camera: ``gap`` (silent), or the judge's ``undecodable``,
    ``black``, ``blurred``, ``frozen`` (degraded)."""

    @property
    def last_seen(self) -> float | None:
        return self.beats[-1].t if self.beats else None

    def to_json(self) -> dict[str, Any]:
        last = self.beats[-1] if self.beats else None
        return {"device_ip": self.device_ip, "recognizer_ip": self.recognizer_ip, "checkpoint_id": self.checkpoint_id,
                "topic": self.topic, "state": self.state, "since": self.since, "watched_since": self.watched_since,
                "share": self.share, "bad": self.bad, "lost": self.lost,
                "last_seen": last.t if last else None, "produced": last.produced if last else None,
                "unrecognized": last.unrecognized if last else None, "window": self.window,
                "images": self.images.to_json(), "images_bad": self.images_bad, "reason": self.reason,
                "camera": self.camera, "video": self.video.to_json(), "video_problem": self.video_problem}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> DeviceTrack:
        track = cls(data["device_ip"], data["recognizer_ip"], data["checkpoint_id"], data["topic"],
                    state=data["state"], since=data["since"], share=data["share"], bad=data["bad"],
                    lost=data.get("lost"), window=data.get("window", {}),
                    images=ImageWindow.from_json(data.get("images")), images_bad=data.get("images_bad"),
                    reason=data.get("reason", ""), camera=data.get("camera") is True,
                    video=VideoWindow.from_json(data.get("video")), video_problem=str(data.get("video_problem") or ""),
                    watched_since=data.get("watched_since", data["since"]))  # rows older than the field
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

    def __init__(self, health: Health, locator: Locator, started_at: float, images: Images | None = None,
                 video: Video | None = None) -> None:
        self.health = health
        self.images = images or Images()
        self.video = video or Video()
        self.locator = locator
        self.started_at = started_at
        self.live_since: float | None = started_at
        """Since when the monitor reads its input up to date (None: not now, e.g. rejoining its group).
        Silence and a stalled ingest are only judged while live: until it has caught up, a monitor that
        was down or rebalancing has not read the heartbeats and batches of its own deafness yet."""
        self.devices: dict[str, DeviceTrack] = {}
        self.jobs: dict[str, tuple[int, float, float]] = {}
        """Per ingest job: (last batch id, its time, the position it reached), to skip replays and to restore
        the ingest's position after a restart."""
        self.latest_stats_t: float | None = None
        self.positions: deque[tuple[float, float]] = deque()
        """Per ``ingest.stats`` batch: (its time, the ingest position it reached), positions never decreasing."""
        self.latency: deque[tuple[float, dict[str, LatencyHistogram]]] = deque()
        self.dirty: set[str] = set()

    def track(self, device_ip: str, t: float) -> DeviceTrack:
        """The device's track, new (and expected to send heartbeats from ``t`` on) when it is first named."""
        track = self.devices.get(device_ip)
        if track is None:
            track = self.devices[device_ip] = DeviceTrack(device_ip, since=self.started_at, watched_since=t)
        return track

    def heartbeat(self, device_ip: str, recognizer_ip: str, checkpoint_id: str, topic: str, t: float,
                  produced: int, unrecognized: int) -> Delta | None:
        """Take one heartbeat; None when it is a replay (not newer than the last one seen)."""
        track = self.track(device_ip, t)
        last = track.beats[-1] if track.beats else None
        if last is not None and t <= last.t:
            return None
        track.recognizer_ip, track.checkpoint_id, track.topic = recognizer_ip, checkpoint_id, topic
        if last is None or produced < last.produced or unrecognized < last.unrecognized:
            delta = Delta(produced, unrecognized)
        else:
            delta = Delta(produced - last.produced, unrecognized - last.unrecognized)
        track.beats.append(Beat(t, produced, unrecognized))
        self.dirty.add(device_ip)
        return delta

    def image(self, device_ip: str, recognizer_ip: str, checkpoint_id: str, topic: str, t: float,
              result: str) -> None:
        """Take one judged capture image (``t``: the record's capture time)."""
        track = self.track(device_ip, t)
        if not track.recognizer_ip:
            track.recognizer_ip, track.checkpoint_id, track.topic = recognizer_ip, checkpoint_id, topic
        track.images.add(t, result)
        self.dirty.add(device_ip)

    def camera(self, camera_id: str, t: float) -> DeviceTrack:
        track = self.track(camera_id, t)
        if not track.camera:
            track.camera = True
            self.dirty.add(camera_id)
        return track

    def video_listed(self, camera_id: str, newest: float | None, t: float) -> None:
        """The watch listed the camera's segments at ``t``: the newest begins at ``newest`` (None: none found)."""
        track = self.camera(camera_id, t)
        before = track.video.newest
        track.video.seen(newest, t)
        if track.video.newest != before:
            self.dirty.add(camera_id)

    def video_segment(self, camera_id: str, start: float, result: str, t: float) -> None:
        """One judged segment of a camera (``start``: when it began, from its key)."""
        track = self.camera(camera_id, t)
        track.video.add(start, result)
        self.dirty.add(camera_id)

    def cameras(self) -> dict[str, float | None]:
        """Every camera to watch (the map's and those seen before) with the start of its newest segment known."""
        found: dict[str, float | None] = {ip: None for ip, where in self.locator.devices().items()
                                          if where.kind == CAMERA_KIND}
        found.update({ip: track.video.newest for ip, track in self.devices.items() if track.camera})
        return found

    def is_replay(self, stats: IngestStats, t: float) -> bool:
        """Already counted: the same batch again, or an older one that is not from a restarted job."""
        last = self.jobs.get(stats.job)
        new = last is None or stats.batch_id > last[0] or (stats.batch_id < last[0] and t > last[1])
        return not new

    def ingest_stats(self, stats: IngestStats, t: float) -> None:
        self.latest_stats_t = t if self.latest_stats_t is None else max(self.latest_stats_t, t)
        self.latency.append((t, stats.latency))
        position = self._position(stats, t)
        self.positions.append((t, position))
        self.jobs[stats.job] = (stats.batch_id, t, position)
        for d in stats.devices:
            track = self.track(d.device_ip, t)
            if not track.recognizer_ip:
                track.recognizer_ip, track.checkpoint_id, track.topic = d.recognizer_ip, d.checkpoint_id, d.topic
            track.counts.append((t, position, d.valid, d.unrecognized, d.invalid))

    def restore_job(self, job: str, batch_id: int, t: float, position: float) -> None:
        """A job's last batch as persisted by the monitor before this one: its replay mark, and the position it
        reached, from which the ingest is judged behind until its next batch (not from this start)."""
        self.jobs[job] = (batch_id, t, position)
        if not self.positions or t > self.positions[-1][0]:
            self.positions.append((t, max(position, self.positions[-1][1]) if self.positions else position))

    def _position(self, stats: IngestStats, t: float) -> float:
        """Up to which bus time the ingest has read after this batch: its time less the ``bus_to_read`` of its
        freshest record (an empty batch has read everything). Never behind an earlier batch's position."""
        freshest = stats.latency.get("bus_to_read")
        lag_s = freshest.histogram.get_min_value() / 1000 if freshest is not None and freshest.count else 0.0
        position = t - lag_s
        return max(position, self.positions[-1][1]) if self.positions else position

    def first_heard(self) -> float | None:
        """When the monitor first heard of a capture device (its earliest track's first heartbeat; tracks persist
        across restarts), None before any."""
        heard = [track.watched_since for track in self.devices.values() if not track.camera]
        return min(heard) if heard else None

    def ingest_behind(self, now: float) -> float | None:
        """Seconds the ingest's position is behind ``now``: the time since its last batch plus how late that batch
        read its freshest record. None before any batch, or while the monitor is not live."""
        if not self.positions or self.live_since is None:
            return None
        return now - self.positions[-1][1]

    def latency_window(self, stage: str, now: float) -> LatencyHistogram:
        merged = LatencyHistogram()
        for t, histograms in self.latency:
            if t > now - self.health.window_s and stage in histograms:
                merged.merge(histograms[stage])
        return merged

    def produced_since(self, t: float) -> int:
        """Records devices reported producing after ``t`` (is there anything for the ingest job to do?). When
        ``t`` is older than the heartbeats kept, what they cover is a lower bound, and enough to say yes."""
        total = 0.0
        for track in self.devices.values():
            if track.beats and track.beats[-1].t > t:
                total += _produced(track.beats, max(t, track.beats[0].t), track.beats[-1].t)
        return round(total)

    def silent_for(self, track: DeviceTrack, now: float) -> float:
        """Seconds since the device's last heartbeat, or since it was first expected when it never sent one; 0
        while the monitor is not live (it may not have read the newest heartbeats yet)."""
        if self.live_since is None or track.camera:  # a camera's schedule stands for its heartbeats
            return 0.0
        return now - (track.watched_since if track.last_seen is None else track.last_seen)

    def location(self, track: DeviceTrack) -> Location:
        return self.locator.locate(track.device_ip, track.recognizer_ip, track.checkpoint_id)

    def judge(self, now: float) -> None:
        """Measure every device and move its state; trims what the windows no longer need."""
        for ip, location in self.locator.devices().items():
            if ip not in self.devices:
                track = self.track(ip, now)
                track.recognizer_ip, track.checkpoint_id = location.recognizer_ip, location.checkpoint_id
            if location.kind == CAMERA_KIND and not self.devices[ip].camera:
                self.camera(ip, now)
        self._trim(now)
        behind = self.ingest_behind(now)
        read_all = behind is not None and behind <= self.health.window_s + self.health.ingest_delay_s
        beat_windows = {ip: self._beat_window(track) for ip, track in self.devices.items()}
        topic_rate: dict[str, float] = {}
        known: dict[str, tuple[float, float]] = {}
        """Per topic, over devices reporting now whose share is learnt: (their records/s, their shares' sum)."""
        for ip, window in beat_windows.items():
            if window is not None:
                track = self.devices[ip]
                rate = window["produced"] / window["span"]
                topic_rate[track.topic] = topic_rate.get(track.topic, 0.0) + rate
                if track.share is not None:
                    known_rate, shares = known.get(track.topic, (0.0, 0.0))
                    known[track.topic] = (known_rate + rate, shares + track.share)
        for ip, track in self.devices.items():
            read_window = self._read_window(track) if read_all else None
            self._judge_one(track, beat_windows[ip], read_window, topic_rate.get(track.topic, 0.0),
                            known.get(track.topic, (0.0, 0.0)), now)

    def _trim(self, now: float) -> None:
        keep_from = now - 3 * self.health.window_s - self.health.ingest_delay_s
        for track in self.devices.values():
            while len(track.beats) > 1 and track.beats[1].t < keep_from:
                track.beats.popleft()
            while track.counts and track.counts[0][0] < keep_from:
                track.counts.popleft()
            track.images.trim(now - self.images.window_s)
        while len(self.positions) > 1 and self.positions[1][0] < keep_from:
            self.positions.popleft()
        while self.latency and self.latency[0][0] < now - self.health.window_s:
            self.latency.popleft()

    def _beat_window(self, track: DeviceTrack) -> dict[str, float] | None:
        """What the device produced over the last ``window_s`` of its heartbeats (the ingest plays no part),
        never reaching back across a silence: that is the silent rule's incident, not missing records."""
        beats = list(track.beats)
        gaps = [i for i in range(1, len(beats)) if beats[i].t - beats[i - 1].t >= self.health.silent_after_s]
        beats = beats[gaps[-1]:] if gaps else beats
        if len(beats) < 2:
            return None
        end = beats[-1]
        older = [b for b in beats if b.t <= end.t - self.health.window_s]
        start = older[-1] if older else beats[0]
        if end.t - start.t < self.health.window_s / 2:
            return None
        return {"span": end.t - start.t, "produced": _produced(track.beats, start.t, end.t)}

    def _read_window(self, track: DeviceTrack) -> dict[str, float] | None:
        """Produced against read between two ingest positions ``window_s`` apart, both within the device's
        heartbeats: every record produced in between has been read, and only those are counted."""
        if len(track.beats) < 2:
            return None
        first, last = track.beats[0].t, track.beats[-1].t
        inside = [p for _, p in self.positions if first <= p <= last]
        if not inside:
            return None
        end = inside[-1]
        older = [p for p in inside if p <= end - self.health.window_s]
        start = older[-1] if older else inside[0]
        if end - start < self.health.window_s / 2:
            return None
        valid = unrecognized = invalid = 0
        for _, position, v, u, i in track.counts:
            if start < position <= end:
                valid, unrecognized, invalid = valid + v, unrecognized + u, invalid + i
        return {"span": end - start, "end": end, "produced": _produced(track.beats, start, end), "valid": valid,
                "unrecognized": unrecognized, "invalid": invalid}

    def _unreadable(self, track: DeviceTrack) -> float | None:
        """Share of the device's records read in the newest ``window_s`` of batches that were not valid."""
        if self.latest_stats_t is None:
            return None
        read = valid = 0
        for t, _, v, u, i in track.counts:
            if t > self.latest_stats_t - self.health.window_s:
                read, valid = read + v + u + i, valid + v
        return 1.0 - valid / read if read >= self.health.min_records else None

    def _judge_one(self, track: DeviceTrack, beats: dict[str, float] | None, read: dict[str, float] | None,
                   topic_rate: float, known: tuple[float, float], now: float) -> None:
        h = self.health
        lost = track.lost  # no completely read window (just started, ingest behind): the last judgement stands
        if read is not None:
            track.window = read
            lost = _share_short(read["valid"], read["produced"], h.min_records)
        missing = None
        if beats is not None and track.share is not None and known[1] > 0:
            # Its learnt share of what the devices reporting now produce, normalised over their shares: a peer
            # that fell silent (or came back) changes the total, not what this device is expected to make.
            expected = track.share / known[1] * known[0] * beats["span"]
            missing = _share_short(beats["produced"], expected, h.min_records)
        shares = [s for s in (self._unreadable(track), lost, missing) if s is not None]
        bad = max(shares) if shares else (track.bad if beats is None else None)
        track.lost, track.bad = lost, bad
        images_bad = track.images.bad_share(now - self.images.window_s, self.images.min_images)
        if images_bad != track.images_bad:
            track.images_bad = images_bad
            self.dirty.add(track.device_ip)
        reasons = [name for name, share, limit in ((RECORDS, bad, h.degraded_share),
                                                   (IMAGES, images_bad, self.images.degraded_share))
                   if share is not None and share >= limit]
        gap, footage = self._video(track, now)
        if footage:
            reasons.append(VIDEO)
        held_gap = gap is None and track.camera and track.state == SILENT  # no listing now: the gap stands
        if gap or held_gap or self.silent_for(track, now) >= h.silent_after_s:
            state = SILENT
            self._problem(track, GAP if track.camera else "")
        elif reasons:
            if footage is not None:  # bad, or good again while another judgement keeps it degraded
                self._problem(track, footage)
            state = DEGRADED
            if ",".join(reasons) != track.reason:
                track.reason = ",".join(reasons)
                self.dirty.add(track.device_ip)
        elif track.state == SILENT:
            heard = track.camera or (track.last_seen is not None and track.last_seen > track.since)
            state = RECOVERING if heard else SILENT  # heard only of before it fell silent (late heartbeats)
        elif track.state == DEGRADED:
            # good again by every judgement that degraded it (one that cannot judge now holds the state)
            cleared = {RECORDS: bad is not None, IMAGES: images_bad is not None, VIDEO: footage is not None}
            state = RECOVERING if all(cleared.get(r, True) for r in (track.reason or RECORDS).split(",")) else DEGRADED
        elif track.state == RECOVERING and now - track.since < h.recovery_s:
            state = RECOVERING
        else:
            state = HEALTHY
        if state == HEALTHY and track.reason:
            track.reason = ""
            self.dirty.add(track.device_ip)
        if state == HEALTHY:
            self._problem(track, "")
        if state != track.state:
            track.state, track.since = state, now
            self.dirty.add(track.device_ip)
        if state == HEALTHY and beats is not None and topic_rate > 0 and bad is not None:
            share = beats["produced"] / beats["span"] / topic_rate
            track.share = share if track.share is None else track.share + _SHARE_ALPHA * (share - track.share)
            self.dirty.add(track.device_ip)

    def _video(self, track: DeviceTrack, now: float) -> tuple[bool | None, str | None]:
        """A camera's gap (None: its listing is stale) and footage problem (:meth:`VideoWindow.footage`)."""
        if not track.camera:
            return False, None
        v = self.video
        gap = track.video.gap(now, track.watched_since, v.gap_factor * v.segment_s, 2 * v.interval_s + v.segment_s)
        return gap, track.video.footage(v.bad_segments)

    def _problem(self, track: DeviceTrack, problem: str) -> None:
        if track.video_problem != problem:
            track.video_problem = problem
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


def _share_short(got: float, wanted: float, min_records: int) -> float | None:
    """How far ``got`` falls short of ``wanted`` (0..1); None when ``wanted`` is too small to say."""
    return min(1.0, max(0.0, 1.0 - got / wanted)) if wanted >= min_records else None


def _produced(beats: deque[Beat], start: float, end: float) -> float:
    """Records produced between two instants within the heartbeats, interpolated linearly between
    heartbeats; a counter that went down means the device restarted and counts from 0."""
    total = 0.0
    for before, after in zip(beats, list(beats)[1:], strict=False):
        overlap = min(end, after.t) - max(start, before.t)
        if overlap > 0:
            delta = after.produced - before.produced if after.produced >= before.produced else after.produced
            total += delta * overlap / (after.t - before.t)
    return total
