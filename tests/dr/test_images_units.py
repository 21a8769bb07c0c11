"""The DR image copier's per-record logic (`dr_mirror/images.py`) against fake stores: fast, no processes."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from contracts import s3_credentials
from contracts.bus_acls import MATRIX
from contracts.records import CITY_TZ, format_time
from dr_mirror.drill.report import image_gaps
from dr_mirror.images import (
    COPIED,
    FOREIGN,
    MALFORMED,
    MISSING_AT_SOURCE,
    NO_IMAGE,
    PRESENT,
    Copier,
    CopierMetrics,
    Runner,
    Stopped,
    Unavailable,
    committable,
    parse,
)
from dr_mirror.videos import VideoMetrics
from web.services.dr import parse_images

KEY = "vehicle/2026/11/30/330102-1-0-0/r1.jpg"


def record(url: str = f"s3://captures/{KEY}", **extra: object) -> bytes:
    return json.dumps({"record_id": "r1", "capture_time": "2026-11-30T08:00:00.000+08:00", "image_url": url,
                       **extra}).encode()


class FakeStore:
    """A captures bucket in memory; ``down`` makes every call raise Unavailable, ``calls`` counts them."""

    def __init__(self, objects: dict[str, bytes] | None = None) -> None:
        self.objects = dict(objects or {})
        self.down = 0  # the next n calls fail
        self.calls: list[tuple[str, str]] = []

    def _check(self, what: str, key: str) -> None:
        self.calls.append((what, key))
        if self.down:
            self.down -= 1
            raise Unavailable("connection refused")

    def exists(self, key: str) -> bool:
        self._check("head", key)
        return key in self.objects

    def get(self, key: str) -> bytes | None:
        self._check("get", key)
        return self.objects.get(key)

    def put(self, key: str, data: bytes) -> None:
        self._check("put", key)
        self.objects[key] = data


def copier(source: FakeStore, target: FakeStore, **kwargs: object) -> Copier:
    return Copier(source, target, CopierMetrics(), backoff_s=0.001, max_backoff_s=0.002, missing_pause_s=0.0,
                  **kwargs)  # type: ignore[arg-type]


def samples(c: Copier) -> str:
    return generate_latest(c.metrics.registry).decode()


def test_an_image_is_copied_under_the_same_key_with_the_same_bytes() -> None:
    source, target = FakeStore({KEY: b"\xff\xd8jpeg"}), FakeStore()
    c = copier(source, target)
    assert c.handle(record()) == COPIED
    assert target.objects == {KEY: b"\xff\xd8jpeg"}
    assert "dr_images_copied_total 1.0" in samples(c)


def test_an_image_already_at_the_dr_site_is_skipped_without_reading_the_primary() -> None:
    source, target = FakeStore({KEY: b"a"}), FakeStore({KEY: b"a"})
    c = copier(source, target)
    assert c.handle(record()) == PRESENT
    assert source.calls == [] and [w for w, _ in target.calls] == ["head"]
    assert 'dr_images_skipped_total{reason="present"} 1.0' in samples(c)


def test_handling_a_record_twice_copies_once() -> None:
    source, target = FakeStore({KEY: b"a"}), FakeStore()
    c = copier(source, target)
    assert [c.handle(record()), c.handle(record())] == [COPIED, PRESENT]
    assert [w for w, _ in target.calls].count("put") == 1


def test_a_record_without_image_is_counted_and_nothing_fetched() -> None:
    source, target = FakeStore(), FakeStore()
    c = copier(source, target)
    assert c.handle(record("", image_error="no_image")) == NO_IMAGE
    assert source.calls == target.calls == []


@pytest.mark.parametrize(("raw", "reason"), [
    (None, MALFORMED), (b"not json", MALFORMED), (b"[1, 2]", MALFORMED), (b'{"record_id": "r"}', MALFORMED),
    (json.dumps({"image_url": 7}).encode(), MALFORMED), (b"\xff\xfe", MALFORMED),
    (record("s3://videos/cam-1/x.webm"), FOREIGN), (record("http://evil.example/x.jpg"), FOREIGN),
    (record("s3://captures/../videos/x.webm"), FOREIGN), (record("s3://captures/a/../../b.jpg"), FOREIGN),
    (record("s3://captures/"), FOREIGN),
])
def test_malformed_and_foreign_records_are_set_aside_and_counted(raw: bytes | None, reason: str) -> None:
    source, target = FakeStore(), FakeStore()
    c = copier(source, target)
    assert c.handle(raw) == reason
    assert source.calls == target.calls == []
    assert f'dr_images_skipped_total{{reason="{reason}"}} 1.0' in samples(c)


def test_an_image_missing_at_the_primary_is_counted_after_a_few_tries_not_forever() -> None:
    source, target = FakeStore(), FakeStore()
    c = copier(source, target, missing_attempts=3)
    assert c.handle(record()) == MISSING_AT_SOURCE
    assert [w for w, _ in source.calls] == ["get"] * 3 and target.objects == {}
    assert 'dr_images_skipped_total{reason="missing_at_source"} 1.0' in samples(c)


@pytest.mark.parametrize("site", ["source", "target"])
def test_a_store_that_does_not_answer_is_retried_until_it_does(site: str) -> None:
    source, target = FakeStore({KEY: b"a"}), FakeStore()
    (source if site == "source" else target).down = 5
    c = copier(source, target)
    assert c.handle(record()) == COPIED
    assert target.objects == {KEY: b"a"}
    store = "primary" if site == "source" else "dr"
    assert f'dr_images_retries_total{{store="{store}"}} 5.0' in samples(c)


def test_stopping_while_a_store_is_away_leaves_the_record_unhandled() -> None:
    source, target = FakeStore({KEY: b"a"}), FakeStore()
    source.down = 10 ** 9
    stopping = threading.Event()
    c = copier(source, target, stopping=stopping)
    threading.Timer(0.05, stopping.set).start()
    with pytest.raises(Stopped):
        c.handle(record())
    assert target.objects == {}


def test_offsets_are_committed_only_past_records_handled_in_order() -> None:
    handled = [("v", 0, 10, True), ("v", 0, 11, True), ("v", 1, 5, True), ("v", 0, 12, False), ("v", 0, 13, True),
               ("f", 0, 3, False), ("v", 1, 6, True)]
    assert committable(handled) == {("v", 0): 12, ("v", 1): 7}


class FakeMessage:
    def __init__(self, topic: str, partition: int, offset: int, value: bytes | None) -> None:
        self._t, self._p, self._o, self._v = topic, partition, offset, value

    def topic(self) -> str:
        return self._t

    def partition(self) -> int:
        return self._p

    def offset(self) -> int:
        return self._o

    def value(self) -> bytes | None:
        return self._v

    def error(self) -> None:
        return None


class FakeConsumer:
    """Hands out its messages once, then nothing; records the commits; stops the copier when drained."""

    def __init__(self, messages: list[FakeMessage], stopping: threading.Event) -> None:
        self.messages, self.stopping = messages, stopping
        self.commits: list[dict[tuple[str, int], int]] = []

    def consume(self, n: int, timeout: float) -> list[FakeMessage]:
        out, self.messages = self.messages[:n], self.messages[n:]
        if not out:
            self.stopping.set()
        return out

    def commit(self, offsets: list, asynchronous: bool) -> None:  # type: ignore[type-arg]
        self.commits.append({(tp.topic, tp.partition): tp.offset for tp in offsets})

    def assignment(self) -> list:  # type: ignore[type-arg]
        return []


def test_the_runner_copies_a_batch_and_commits_after_it() -> None:
    objects = {f"vehicle/k{i}.jpg": bytes([i]) for i in range(40)}
    source, target = FakeStore(objects), FakeStore()
    stopping = threading.Event()
    messages = [FakeMessage("capture.vehicle", i % 2, i // 2, record(f"s3://captures/vehicle/k{i}.jpg"))
                for i in range(40)] + [FakeMessage("capture.vehicle", 0, 20, b"garbage")]
    consumer = FakeConsumer(messages, stopping)
    c = copier(source, target, stopping=stopping)
    Runner(c, consumer, workers=4, batch=15).run()
    assert target.objects == objects
    # a commit per batch of 15; the last one past the garbage record, set aside
    assert len(consumer.commits) == 3
    assert consumer.commits[-1] == {("capture.vehicle", 0): 21, ("capture.vehicle", 1): 20}


def test_image_gaps_count_images_missing_at_the_dr_site_next_to_those_missing_everywhere() -> None:
    primary, dr = {"a", "b", "c"}, {"a"}
    gaps = image_gaps(["a", "b", "c", "d", "b"], primary.__contains__, dr.__contains__)
    assert gaps == {"images": 4, "images_at_dr": 1, "images_missing_at_dr": 2, "images_missing_at_both": 1}


def test_lag_seconds_follow_the_capture_time_of_the_last_record_handled() -> None:
    source, target = FakeStore({KEY: b"a"}), FakeStore()
    c = copier(source, target, clock=lambda: 1_000_000.0)
    now = format_time(__import__("datetime").datetime.fromtimestamp(999_990.0, CITY_TZ))
    c.handle(record(capture_time=now))
    assert c.last_capture_time == 999_990.0
    assert 'dr_images_copy_delay_seconds_sum 10.0' in samples(c)


def test_the_console_reads_the_copiers_figures() -> None:
    source, target = FakeStore({KEY: b"a"}), FakeStore()
    c = copier(source, target)
    c.handle(record())
    c.handle(record("s3://captures/vehicle/gone.jpg"))
    c.handle(b"{}")
    c.metrics.lag_records.set(42)
    c.metrics.lag_seconds.set(1.25)
    figures = parse_images(samples(c))
    assert (figures["copied"], figures["lag_records"], figures["lag_seconds"], figures["missing_at_source"]) == \
        (1, 42, 1.25, 1)
    assert figures["skipped"][MALFORMED] == 1


def test_parse_names_the_key_and_capture_time() -> None:
    image = parse(record())
    assert image is not None and image.key == KEY and image.capture_time is not None


def test_the_copier_identity_writes_only_at_the_dr_site_and_reads_only_captures_and_footage() -> None:
    primary, dr = s3_credentials.site_rights("primary"), s3_credentials.site_rights("dr")
    assert primary["dr-images"] == ("Read:captures", "Read:videos", "List:videos")
    assert set(dr["dr-images"]) == {"Read:captures", "Write:captures/*", "Read:videos", "Write:videos/*"}
    assert {k: v for k, v in dr.items() if k != "dr-images"} == {k: v for k, v in primary.items() if k != "dr-images"}
    with pytest.raises(ValueError):
        s3_credentials.site_rights("mars")
    groups = [g.name for g in MATRIX["dr-loaders"] if g.resource.value == "GROUP"]
    assert "dr-images" in groups


def test_make_up_runs_the_copier_with_each_sites_key(tmp_path: Path) -> None:
    from contracts.config import load
    from deploy.dr_site import DrSettings, images_command

    config = load()
    dr = DrSettings.from_config(config, tmp_path)
    cmd = images_command(config, dr)
    assert cmd[cmd.index("--source-credentials") + 1] == str(tmp_path / "secrets" / "s3-dr-images.env")
    assert cmd[cmd.index("--target-credentials") + 1] == str(tmp_path / "secrets" / "dr-object-store" /
                                                             "s3-dr-images.env")
    assert cmd[cmd.index("--target-endpoint") + 1] == "127.0.0.1:19000"
    assert cmd[cmd.index("--metrics-port") + 1] == "9321"


def test_a_lag_not_measured_yet_is_unknown_not_zero() -> None:
    figures = parse_images(generate_latest(CopierMetrics().registry).decode())
    assert figures["lag_records"] is None and figures["lag_seconds"] is None and figures["copied"] == 0
    assert figures["videos_copied"] is None and figures["videos_pending"] is None  # a copier without footage


def test_the_console_reads_the_footage_figures_of_the_copier() -> None:
    metrics = CopierMetrics()
    videos = VideoMetrics(metrics.registry)
    assert parse_images(generate_latest(metrics.registry).decode())["videos_pending"] is None  # not measured yet
    videos.copied.inc(7)
    videos.pending.set(3)
    videos.lag_seconds.set(61.5)
    figures = parse_images(generate_latest(metrics.registry).decode())
    assert (figures["videos_copied"], figures["videos_pending"], figures["videos_lag_seconds"]) == (7, 3, 61.5)
