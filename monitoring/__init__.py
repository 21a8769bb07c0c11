"""Latency and data-quality monitoring, alert rules and notifications (issue 11; the book's 10.3.3-10.3.4).

``python -m monitoring`` consumes ``device.heartbeat``, ``ingest.stats`` and dead letters, keeps
per-minute and per-hour series in HBase, judges each device's health from counts, evaluates the
``[monitoring]`` rules with Prometheus' and Alertmanager's semantics, publishes alert changes to
the ``alerts`` topic and notifies webhook and SMTP receivers. :mod:`monitoring.queries` is the read
side the console calls.
"""
