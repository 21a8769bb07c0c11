"""The gateway's Prometheus metrics: requests and their latency per Thrift method, as HBase's Thrift server counts
them per method (`<method>_num_ops`, `<method>_avg_time` in its ThriftOne metrics), with the outcome (`ok`, or
the Thrift error the call was answered with) so a client hammering a limit shows up. Served on `--metrics-port`."""

from __future__ import annotations

import logging

from prometheus_client import Counter, Histogram, start_http_server

log = logging.getLogger(__name__)

REQUESTS = Counter("hbase_thrift_requests", "Thrift calls answered, by method and outcome", ["method", "outcome"])
LATENCY = Histogram("hbase_thrift_request_duration_seconds", "Time from a call's decode to its reply, by method",
                    ["method"], buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                                         2.5, 5.0, 10.0))


def observe(method: str, outcome: str, seconds: float) -> None:
    REQUESTS.labels(method, outcome).inc()
    LATENCY.labels(method).observe(seconds)


def serve(host: str, port: int) -> None:
    """The exporter thread on `host:port` (this process's default registry: the gateway's metrics, CPU and RSS)."""
    start_http_server(port, addr=host)
    log.info("metrics on http://%s:%d/metrics", host, port)
