"""Prometheus metrics of the surveillance service (served on ``[surveillance] metrics_port``).

One registry for every stage so one scrape sees the whole process; labels name the stage.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

HITS = Counter("surveillance_hits", "Hits published", ["kind", "match"])
COMMANDS = Counter("surveillance_commands", "Commands applied or rejected", ["command", "status"])
SKIPPED = Counter("surveillance_records_skipped", "Input records set aside (malformed, foreign or unrecognised)",
                  ["stage", "reason"])
LATE = Counter("surveillance_late_records", "Records older than their window plus the allowed lateness", ["stat"])
DELIVERY_RETRIES = Counter("surveillance_delivery_retries", "Outputs produced again after a failed delivery",
                           ["stage"])
LATENCY = Histogram("surveillance_processing_seconds", "Consumed to outputs acknowledged, per record", ["stage"],
                    buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0))
ACTIVE = Gauge("surveillance_stage_active", "1 while the stage consumes in its group; 0 while its site stands by",
               ["stage"])
