"""The native Python client: producer, consumer and admin, configured with the Java client's names.

`from bus.client import KafkaProducer, KafkaConsumer` works; the names load on first use so that
importing a small piece (say `bus.client.connection`) does not pull in the whole client.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "KafkaProducer": "bus.client.producer",
    "ProducerInterceptor": "bus.client.producer",
    "RecordMetadata": "bus.client.accumulator",
    "KafkaConsumer": "bus.client.consumer",
    "ConsumerRecords": "bus.client.consumer",
    "ConsumerRecord": "bus.client.fetcher",
    "ConsumerRebalanceListener": "bus.client.subscription",
    "TopicPartition": "bus.client.subscription",
    "OffsetAndMetadata": "bus.client.subscription",
    "OffsetAndTimestamp": "bus.client.subscription",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'bus.client' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
