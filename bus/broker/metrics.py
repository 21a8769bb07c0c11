"""Broker metrics: requests per API, their latencies, and the event loop's stalls, for Prometheus.

Kafka publishes these through JMX (kafka.network:type=RequestMetrics, and no loop, since it has threads);
there is no standard key for an HTTP exporter, so ours is `bus.metrics.listener` (host:port; empty: off). The
same endpoint serves Kafka's own metric names (`bus.broker.kafka_metrics`), which Kafka dashboards expect.

The hot path only bumps plain integers: a request costs one `bisect` and three additions, about a
microsecond, where prometheus-client's own Histogram would take a lock per observation. The numbers
become Prometheus families when something scrapes (`BrokerCollector.collect`, run in the exporter's
thread; reading ints and lists the loop writes is safe under the GIL, and a scrape that sees a
request counted but not yet timed is off by one request for one scrape).
"""

from __future__ import annotations

import asyncio
import bisect
import gc
import logging
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from typing import TYPE_CHECKING
from wsgiref.simple_server import WSGIServer

from kio.schema.index import api_key_map
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from bus.broker.kafka_metrics import KafkaCollector, LoopIdle
from bus.network.metrics import AuthenticationMetrics

if TYPE_CHECKING:
    from bus.broker.kafka_apis import KafkaApis
    from bus.config.broker import BrokerConfig
    from bus.network.socket_server import SocketServer

log = logging.getLogger(__name__)

# Seconds; Kafka's request-time percentiles span the same range (sub-millisecond to a long poll).
LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                   2.5, 5.0, 10.0, 30.0)
STALL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Histogram:
    """Bucket counts, count and sum, updated by the event loop only."""

    __slots__ = ("bounds", "buckets", "count", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.buckets = [0] * (len(bounds) + 1)  # the last one is +Inf
        self.count = 0
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.buckets[bisect.bisect_left(self.bounds, value)] += 1
        self.count += 1
        self.total += value

    def cumulative(self) -> list[tuple[str, int]]:
        out = []
        running = 0
        for bound, count in zip((*map(str, self.bounds), "+Inf"), list(self.buckets), strict=True):
            running += count
            out.append((bound, running))
        return out


class RequestMetrics:
    """Per API key: requests answered, requests whose handler failed, and time from decode to response."""

    __slots__ = ("errors", "latency")

    def __init__(self) -> None:
        self.latency: dict[int, Histogram] = {}
        self.errors: dict[int, int] = {}

    def observe(self, api_key: int, seconds: float) -> None:
        histogram = self.latency.get(api_key)
        if histogram is None:
            histogram = self.latency[api_key] = Histogram(LATENCY_BUCKETS)
        histogram.observe(seconds)

    def failed(self, api_key: int) -> None:
        self.errors[api_key] = self.errors.get(api_key, 0) + 1

    def requests(self, api_key: int) -> int:
        histogram = self.latency.get(api_key)
        return histogram.count if histogram else 0


class LoopMonitor:
    """Measures how late the event loop wakes a sleeper: the longest any callback kept every connection waiting.

    A task sleeps `interval` seconds again and again; the wake-up's delay past its deadline is the stall
    that overlapped it. A stall of S seconds shows as at least S - interval, so with the default 50 ms the
    figure is within 50 ms of the truth, for 20 wake-ups a second (as coarse as the stalls worth an alert: the
    log threshold is 100 ms). At 5 ms, 200 wake-ups a second cost an idle broker's loop thread 3.6 % of a core
    against 0.65 % now, paid by every node of every cluster. Stalls over `log_threshold` are logged.
    """

    WINDOW = 10  # seconds covered by `recent_worst`

    def __init__(self, interval: float = 0.05, log_threshold: float = 0.1) -> None:
        self.interval = interval
        self.log_threshold = log_threshold
        self.lag = Histogram(STALL_BUCKETS)
        self.worst = 0.0
        self._recent = [0.0] * self.WINDOW  # worst lag per second, a ring indexed by int(monotonic) % WINDOW
        self._recent_second = [0] * self.WINDOW
        self._task: asyncio.Task[None] | None = None
        self._watchdog: StallWatchdog | None = None
        self.gc = GcPauses()
        self.idle = LoopIdle()  # Kafka's RequestHandlerAvgIdlePercent: the loop thread's idle share
        self.last_tick = 0.0  # when the sleeper last went to sleep (monotonic): the watchdog's sign of life

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())
        self._watchdog = StallWatchdog(self, threading.get_ident())
        self._watchdog.start()
        self.gc.install()

    def stop(self) -> None:
        if self._task:
            self._task.cancel()
        if self._watchdog:
            self._watchdog.stop()
        self.gc.uninstall()

    async def _run(self) -> None:
        interval = self.interval
        while True:
            deadline = time.monotonic() + interval
            self.last_tick = deadline
            await asyncio.sleep(interval)
            now = time.monotonic()
            self.record(max(0.0, now - deadline), now)
            self.idle.sample(now)

    def record(self, lag: float, now: float) -> None:
        self.lag.observe(lag)
        if lag > self.worst:
            self.worst = lag
        second = int(now)
        slot = second % self.WINDOW
        if self._recent_second[slot] != second:
            self._recent_second[slot] = second
            self._recent[slot] = 0.0
        if lag > self._recent[slot]:
            self._recent[slot] = lag
        if lag > self.log_threshold:
            log.warning("event loop stalled for %.1f ms", lag * 1000)

    def recent_worst(self, now: float | None = None) -> float:
        """The worst stall of the last WINDOW seconds."""
        second = int(time.monotonic() if now is None else now)
        return max((lag for lag, at in zip(self._recent, self._recent_second, strict=True)
                    if second - at < self.WINDOW), default=0.0)


class StallWatchdog(threading.Thread):
    """Says what the loop was doing when it stalled: the loop thread's stack, logged as the stall grows.

    A number says that the loop stalled, not why; a thread that looks at the loop thread's frame while the
    stall lasts does (as Go's and the JVM's blocked-thread detectors do). It sleeps until the moment the
    loop's latest tick would be late by the next threshold, so while the loop keeps ticking it wakes about
    ten times a second (it polled every 10 ms before: a hundred wake-ups a second, each taking the GIL, were
    a third of an idle broker's CPU). A stall caused by another thread holding the GIL shows the loop
    thread waiting for the GIL at an innocent line; the GC pauses are counted separately for that reason.
    """

    MIN_WAIT = 0.01

    def __init__(self, monitor: LoopMonitor, loop_thread: int) -> None:
        super().__init__(name="bus-stall-watchdog", daemon=True)
        self.monitor = monitor
        self.loop_thread = loop_thread
        self._stop_event = threading.Event()

    def stop(self) -> None:
        self._stop_event.set()

    def run(self) -> None:
        stalled_tick, next_report = 0.0, 0.0
        wait = self.MIN_WAIT
        while not self._stop_event.wait(wait):
            tick = self.monitor.last_tick
            if tick != stalled_tick:  # the loop moved on: a new stall starts at the threshold again
                stalled_tick, next_report = tick, self.monitor.log_threshold
            stalled = time.monotonic() - tick - self.monitor.interval
            if tick and stalled > next_report:
                next_report *= 2  # a long stall is sampled at 0.1, 0.2, 0.4, ... s: where it went, not one spot
                stack = _innermost_calls(self.loop_thread, 12)
                if stack:
                    log.warning("event loop stalled for %.0f ms so far, in:\n%s", stalled * 1000,
                                "".join(stack.format()))
            wait = max(self.MIN_WAIT, next_report - stalled)  # until this tick is late by the next threshold


def _innermost_calls(thread_id: int, limit: int) -> traceback.StackSummary | None:
    """Where the thread is: its innermost `limit` calls, read off its frames in one short, GIL-held walk.

    No frame object may be kept past the walk: a frame that outlives its call keeps its locals (CPython 3.11
    moves them into the frame object), so a memoryview the loop thread held at that moment would pin its
    bytearray, and the loop's next resize of it would raise BufferError (an offset index's pending entries,
    in the CI run that found it: every later produce to that partition failed). The source lines are looked
    up only after the frames are let go.
    """
    frame = sys._current_frames().get(thread_id)
    calls: list[traceback.FrameSummary] = []
    while frame is not None and len(calls) < limit:
        code = frame.f_code
        calls.append(traceback.FrameSummary(code.co_filename, frame.f_lineno, code.co_name, lookup_line=False))
        frame = frame.f_back
    del frame
    return traceback.StackSummary.from_list(reversed(calls)) if calls else None


class GcPauses:
    """The time the collector stops the world, per generation, so a stall can be told apart from a GC pause."""

    def __init__(self) -> None:
        self.seconds = [0.0, 0.0, 0.0]
        self.worst = 0.0
        self._started = 0.0

    def install(self) -> None:
        gc.callbacks.append(self._callback)

    def uninstall(self) -> None:
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        spent = time.perf_counter() - self._started
        self.seconds[info["generation"]] += spent
        self.worst = max(self.worst, spent)


class BrokerCollector(Collector):
    def __init__(self, requests: RequestMetrics, loop: LoopMonitor, gauges: dict[str, tuple[str, object]],
                 authentications: AuthenticationMetrics | None = None) -> None:
        self.requests = requests
        self.loop = loop
        self.gauges = gauges  # name -> (help, zero-argument callable giving the value)
        self.authentications = authentications

    def collect(self) -> Iterator[Metric]:
        latency = HistogramMetricFamily("bus_request_seconds", "Time from a request's decode to its response, by API",
                                        labels=["api"])
        for key, histogram in sorted(self.requests.latency.items()):
            latency.add_metric([api_key_map.get(key, str(key))], histogram.cumulative(), histogram.total)
        yield latency
        errors = CounterMetricFamily("bus_request_handler_errors", "Requests answered UNKNOWN_SERVER_ERROR "
                                     "because their handler raised, by API", labels=["api"])
        for key, count in sorted(self.requests.errors.items()):
            errors.add_metric([api_key_map.get(key, str(key))], count)
        yield errors
        stalls = HistogramMetricFamily("bus_event_loop_lag_seconds", "How late the event loop woke a 50 ms sleeper")
        stalls.add_metric([], self.loop.lag.cumulative(), self.loop.lag.total)
        yield stalls
        yield GaugeMetricFamily("bus_event_loop_stall_max_seconds", "Worst event loop stall since start",
                                value=self.loop.worst)
        yield GaugeMetricFamily("bus_event_loop_stall_recent_max_seconds",
                                "Worst event loop stall of the last 10 seconds", value=self.loop.recent_worst())
        gc_seconds = CounterMetricFamily("bus_gc_pause_seconds", "Time the garbage collector stopped the world",
                                         labels=["generation"])
        for generation, spent in enumerate(self.loop.gc.seconds):
            gc_seconds.add_metric([str(generation)], spent)
        yield gc_seconds
        yield GaugeMetricFamily("bus_gc_pause_max_seconds", "Longest garbage collection since start",
                                value=self.loop.gc.worst)
        if self.authentications is not None:
            yield from self.authentications.collect()
        for name, (doc, read) in self.gauges.items():
            yield GaugeMetricFamily(name, doc, value=read())  # type: ignore[operator]


def serve(listener: str, *collectors: Collector) -> WSGIServer:
    """Start the exporter thread on `host:port` (port 0: any free port), with the process's CPU and RSS too."""
    host, _, port = listener.rpartition(":")
    registry = CollectorRegistry()
    for collector in collectors:
        registry.register(collector)
    registry.register(ProcessCollector(registry=None))
    server, _thread = start_http_server(int(port), addr=host or "0.0.0.0", registry=registry)
    bound = server.server_address
    log.info("metrics on http://%s:%d/metrics", bound[0], bound[1])
    return server


class BrokerMetrics:
    """The loop monitor and, when `bus.metrics.listener` is set, the exporter; started and stopped with the broker."""

    def __init__(self, config: BrokerConfig, apis: KafkaApis, network: SocketServer) -> None:
        self.monitor = LoopMonitor(log_threshold=int(config["bus.event.loop.stall.log.ms"]) / 1000.0)
        self.listener = str(config["bus.metrics.listener"])
        queue = network.queue
        self.collector = BrokerCollector(apis.metrics, self.monitor, {
            "bus_connections": ("Open client connections", lambda: len(network.connections)),
            "bus_queued_requests": ("Requests read and not yet answered", lambda: queue.requests),
            "bus_queued_request_bytes": ("Bytes of requests read and not yet answered", lambda: queue.bytes),
        }, network.authentications)
        self.kafka = KafkaCollector(lambda: apis.services, apis.metrics, apis.services.topic_metrics,
                                    self.monitor.idle)
        self.server: WSGIServer | None = None
        self.bound: tuple[str, int] | None = None

    def start(self) -> None:
        self.monitor.start()
        if self.listener:
            self.server = serve(self.listener, self.collector, self.kafka)
            host, port = self.server.server_address[:2]
            self.bound = (str(host), int(port))

    def stop(self) -> None:
        self.monitor.stop()
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
