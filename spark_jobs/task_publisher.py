"""Publishing a video task's records: ``video.status`` changes and ``video.results`` objects, keyed by task id.

Both video jobs (the streaming ingest job, which queues, launches, retries and cancels, and the batch
synopsis job, which reports progress and results) publish through this one class, so every status value
is built by :func:`contracts.video.status_record` and every record of a task lands in the same partition,
in order. The producer is idempotent; :meth:`flush` raises when anything was not acknowledged, so a
caller only moves on (commits offsets, exits 0) once its records are on the bus.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Any

from contracts.video import encode, status_record


class TaskPublisher:
    def __init__(self, bus: Mapping[str, str], status_topic: str, results_topic: str, client_id: str) -> None:
        """``bus``: the job's librdkafka settings (:func:`contracts.bus_client.librdkafka`)."""
        from confluent_kafka import Producer

        self.status_topic = status_topic
        self.results_topic = results_topic
        self._producer = Producer({**bus, "enable.idempotence": True, "linger.ms": 5, "client.id": client_id})
        self._errors: list[str] = []
        self._lock = threading.Lock()

    def _report(self, err: Any, _msg: Any) -> None:
        if err is not None:
            with self._lock:
                self._errors.append(str(err))

    def _produce(self, topic: str, task_id: str, record: dict[str, Any]) -> None:
        while True:
            try:
                self._producer.produce(topic, key=task_id.encode(), value=encode(record), on_delivery=self._report)
                return
            except BufferError:  # local queue full: let the sender drain it
                self._producer.poll(0.05)

    def status(self, task_id: str, state: str, **fields: Any) -> dict[str, Any]:
        """Queue one ``video.status`` value (see :func:`contracts.video.status_record`) and return it."""
        record = status_record(task_id, state, **fields)
        self._produce(self.status_topic, task_id, record)
        self._producer.poll(0)
        return record

    def results(self, task_id: str, records: Iterable[dict[str, Any]]) -> None:
        for record in records:
            self._produce(self.results_topic, task_id, record)

    def flush(self, timeout: float = 30.0) -> None:
        left = self._producer.flush(timeout)
        with self._lock:
            errors, self._errors = self._errors, []
        if left or errors:
            raise RuntimeError(f"publishing video records failed: {errors[:3] or f'{left} not acknowledged'}")
