"""Prometheus metrics of the mirror: lag per partition, throughput, stopped partitions, checkpoints.

Names follow MM2's MirrorSourceConnector metrics where one exists (record-count, byte-count,
replication-latency) under a `dr_mirror_` prefix; lag is the source's high watermark minus the
mirror's position, per partition, the figure a DR operator watches, and its age: while records wait, now minus the
newest timestamp the target holds of the partition (what losing the primary now would cost, in time).
``dr_mirror_copying`` is 0 while a mirror following the active-site record (`dr_mirror.direction`) stands by; the
partitions' figures go when it stops copying, so a direction standing by claims no lag. A taken metrics port is not
fatal (a second mirror started with the same command line): the mirror logs the free port it serves instead.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from contracts.metrics_http import serve_metrics


class MirrorMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        labels = ("topic", "partition")
        self.records = Counter("dr_mirror_records", "Records mirrored to the target", ("topic",),
                               registry=self.registry)
        self.bytes = Counter("dr_mirror_bytes", "Record-batch bytes mirrored to the target (as compressed)",
                             ("topic",), registry=self.registry)
        self.lag = Gauge("dr_mirror_partition_lag_records", "Source high watermark minus the mirror's position",
                         labels, registry=self.registry)
        self.lag_seconds = Gauge(
            "dr_mirror_partition_lag_seconds",
            "While records wait, now minus the newest record timestamp the target holds of the partition (0 when "
            "none wait; NaN while unknown: nothing mirrored yet and the target holds nothing of it)",
            labels, registry=self.registry)
        self.stopped = Gauge("dr_mirror_partition_stopped", "1 while a partition is stopped by an error",
                             labels, registry=self.registry)
        self.latency = Histogram("dr_mirror_replication_latency_seconds",
                                 "Time from a batch's max timestamp to its acknowledgement by the target",
                                 buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30), registry=self.registry)
        self.syncs = Counter("dr_mirror_offset_syncs", "Offset syncs written (one per gap in a source partition)",
                             registry=self.registry)
        self.checkpoints = Counter("dr_mirror_checkpoints", "Checkpoints emitted for consumer groups",
                                   registry=self.registry)
        self.retries = Counter("dr_mirror_produce_retries", "Produce attempts retried (target unreachable or busy)",
                               registry=self.registry)
        self.skipped = Counter("dr_mirror_records_skipped",
                               "Records of the mirror's own topics (offset syncs) set aside as malformed or foreign",
                               ("topic", "reason"), registry=self.registry)
        self.copying = Gauge("dr_mirror_copying", "1 while the mirror copies, 0 while it stands by (its source site "
                             "is not the active one)", registry=self.registry)

    def forget_partitions(self) -> None:
        """Drop every partition's lag, age and stopped figures: a stopped mirror no longer knows them, and the age
        is computed from the partition's last state at each scrape, so it would grow for ever."""
        for gauge in (self.lag, self.lag_seconds, self.stopped):
            gauge.clear()

    def serve(self, port: int, host: str = "127.0.0.1") -> int:
        """Serve /metrics on ``port``, or on a free port (logged) when it is taken; returns the port bound."""
        return serve_metrics(port, host=host, registry=self.registry, name="dr_mirror")
