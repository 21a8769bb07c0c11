"""The broker's metrics under Kafka's names, as the Prometheus JMX exporter makes them of Kafka's MBeans, so the
dashboards and alert rules a Kafka operator already has work unchanged.

- `kafka_server_brokertopicmetrics_messagesin_total{topic}`, `..._bytesin_total`, `..._bytesout_total`
  (kafka.server:type=BrokerTopicMetrics,name=MessagesInPerSec,topic=T; BytesInPerSec, BytesOutPerSec);
- `kafka_server_replicamanager_underreplicatedpartitions`, `..._partitioncount`, `..._leadercount`,
  `..._isrshrinks_total`, `..._isrexpands_total` (kafka.server:type=ReplicaManager);
- `kafka_controller_kafkacontroller_activecontrollercount`, `..._offlinepartitionscount`
  (kafka.controller:type=KafkaController);
- `kafka_network_requestmetrics_requests_total{request}` (RequestMetrics RequestsPerSec) and
  `kafka_network_requestmetrics_totaltimems{request,quantile}` (the TotalTimeMs histogram's percentiles);
- `kafka_server_kafkarequesthandlerpool_requesthandleravgidlepercent` (0 to 1, as the exporter reads the MBean);
- `kafka_consumergroup_lag{consumergroup,topic,partition}`, as kafka-exporter names it.

Request names are Kafka's (`Produce`, `Fetch`, `Metadata`, ...). The request handler pool is the event loop here:
its idle share is 1 minus the loop thread's CPU time over the last seconds. BytesIn and MessagesIn count what
clients produce, BytesOut what consumers fetch (replication is not counted, as in Kafka). Consumer lag is the
partition's high watermark minus the group's committed offset, for the groups this broker coordinates and the
partitions it hosts, computed at each scrape, so it is current within a scrape of a commit.

The hot path only adds to plain dicts (`TopicMetrics`); everything else is read when Prometheus scrapes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from kio.schema.index import api_key_map
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from bus.broker.context import BrokerServices
    from bus.broker.metrics import Histogram, RequestMetrics

QUANTILES = (0.5, 0.75, 0.95, 0.98, 0.99, 0.999)  # the percentiles Kafka's histograms publish
IDLE_WINDOW_S = 10.0


class TopicMetrics:
    """Per topic: records and bytes clients produced, bytes consumers fetched (BrokerTopicMetrics)."""

    __slots__ = ("bytes_in", "bytes_out", "messages_in")

    def __init__(self) -> None:
        self.messages_in: dict[str, int] = {}
        self.bytes_in: dict[str, int] = {}
        self.bytes_out: dict[str, int] = {}

    def produced(self, topic: str, records: int, size: int) -> None:
        self.messages_in[topic] = self.messages_in.get(topic, 0) + records
        self.bytes_in[topic] = self.bytes_in.get(topic, 0) + size

    def fetched(self, topic: str, size: int) -> None:
        self.bytes_out[topic] = self.bytes_out.get(topic, 0) + size


class LoopIdle:
    """The event loop thread's idle share: 1 - (its CPU time / wall time) over about the last `IDLE_WINDOW_S`.
    `sample` runs on the loop thread (the loop monitor's tick), since `time.thread_time` is per thread."""

    def __init__(self) -> None:
        self._window: list[tuple[float, float]] = []  # (monotonic, thread_time), oldest first

    def sample(self, now: float) -> None:
        window = self._window
        if window and now - window[-1][0] < 1.0:
            return
        window.append((now, time.thread_time()))
        while len(window) > 2 and now - window[1][0] >= IDLE_WINDOW_S:
            window.pop(0)

    def idle(self) -> float:
        window = list(self._window)
        if len(window) < 2:
            return 1.0
        (start, cpu_start), (end, cpu_end) = window[0], window[-1]
        return min(1.0, max(0.0, 1.0 - (cpu_end - cpu_start) / (end - start)))


def quantile(histogram: Histogram, q: float) -> float:
    """The `q` quantile of a bucketed histogram, interpolated linearly inside its bucket (as PromQL's
    histogram_quantile), in the histogram's unit; the highest finite bound for the +Inf bucket."""
    total = histogram.count
    if total == 0:
        return 0.0
    rank = q * total
    seen, lower = 0, 0.0
    for bound, count in zip(histogram.bounds, histogram.buckets, strict=False):
        if count and seen + count >= rank:
            return lower + (bound - lower) * (rank - seen) / count
        seen += count
        lower = bound
    return histogram.bounds[-1]


def request_name(api_key: int) -> str:
    """Kafka's request name (`Produce`, `OffsetCommit`, `ApiVersions`), from kio's snake-case API name."""
    name = api_key_map.get(api_key)
    return str(api_key) if name is None else "".join(part.title() for part in name.split("_"))


class KafkaCollector(Collector):
    """Kafka's metric families, read from the broker's state at scrape time (the exporter's thread; plain reads of
    what the loop writes, safe under the GIL)."""

    def __init__(self, services: Callable[[], BrokerServices], requests: RequestMetrics, topics: TopicMetrics,
                 idle: LoopIdle) -> None:
        self.services = services
        self.requests = requests
        self.topics = topics
        self.idle = idle

    def collect(self) -> Iterator[Metric]:
        yield from self._topic_families()
        yield from self._replica_families()
        yield from self._request_families()
        yield GaugeMetricFamily("kafka_server_kafkarequesthandlerpool_requesthandleravgidlepercent",
                                "Share of time the request handler (the event loop) was idle, 0 to 1",
                                value=self.idle.idle())
        yield self._consumer_lag()

    def _topic_families(self) -> Iterator[Metric]:
        for attribute, name, doc in (("messages_in", "messagesin", "Records clients produced"),
                                     ("bytes_in", "bytesin", "Bytes clients produced"),
                                     ("bytes_out", "bytesout", "Bytes consumers fetched")):
            family = CounterMetricFamily(f"kafka_server_brokertopicmetrics_{name}", doc, labels=["topic"])
            for topic, value in sorted(dict(getattr(self.topics, attribute)).items()):
                family.add_metric([topic], value)
            yield family

    def _replica_families(self) -> Iterator[Metric]:
        services = self.services()
        partitions = list(services.replicas.partitions.values())
        leaders = [p for p in partitions if p.is_leader]
        for name, doc, value in (
                ("underreplicatedpartitions", "Partitions led here with fewer in-sync replicas than replicas",
                 sum(1 for p in leaders if len(p.isr) < len(p.replicas))),
                ("partitioncount", "Partitions with a replica on this broker", len(partitions)),
                ("leadercount", "Partitions this broker leads", len(leaders))):
            yield GaugeMetricFamily(f"kafka_server_replicamanager_{name}", doc, value=value)
        yield CounterMetricFamily("kafka_server_replicamanager_isrshrinks", "In-sync replica sets this leader shrank",
                                  value=services.replicas.isr_shrinks)
        yield CounterMetricFamily("kafka_server_replicamanager_isrexpands", "In-sync replica sets this leader grew",
                                  value=services.replicas.isr_expands)
        active = services.controller.active
        offline = 0
        if active:
            offline = sum(1 for topic in list(services.controller.image.topics.values())
                          for state in list(topic.partitions.values()) if state.leader < 0)
        yield GaugeMetricFamily("kafka_controller_kafkacontroller_activecontrollercount",
                                "1 on the active controller, 0 elsewhere", value=int(active))
        yield GaugeMetricFamily("kafka_controller_kafkacontroller_offlinepartitionscount",
                                "Partitions without a leader (reported by the active controller)", value=offline)

    def _request_families(self) -> Iterator[Metric]:
        latency = sorted(dict(self.requests.latency).items())
        counts = CounterMetricFamily("kafka_network_requestmetrics_requests", "Requests answered, by request",
                                     labels=["request"])
        times = GaugeMetricFamily("kafka_network_requestmetrics_totaltimems",
                                  "Time from a request's decode to its response in ms, percentiles since start",
                                  labels=["request", "quantile"])
        for key, histogram in latency:
            name = request_name(key)
            counts.add_metric([name], histogram.count)
            for q in QUANTILES:
                times.add_metric([name, str(q)], quantile(histogram, q) * 1000)
        yield counts
        yield times

    def _consumer_lag(self) -> Metric:
        services = self.services()
        family = GaugeMetricFamily("kafka_consumergroup_lag", "High watermark minus the group's committed offset",
                                   labels=["consumergroup", "topic", "partition"])
        offsets = services.groups.offsets
        hosted = services.replicas.partitions
        for group_id in sorted(offsets.group_ids()):
            for tp, value in sorted(dict(offsets.of(group_id)).items()):
                partition = hosted.get(tp)
                if partition is not None and value.offset >= 0:
                    family.add_metric([group_id, tp.topic, str(tp.partition)],
                                      max(0, partition.high_watermark - value.offset))
        return family
