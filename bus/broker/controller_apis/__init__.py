"""The controller listener's APIs (`controller.listener.names`): KRaft's own RPCs, ApiVersions, and what brokers
ask the active controller (Envelope, BrokerRegistration, BrokerHeartbeat, AllocateProducerIds, AlterPartition; see
`bus.controller.controller_channel`), and SaslHandshake and SaslAuthenticate for a SASL controller listener.

One module per API, as in `bus.broker.apis`. Each serves exactly the version the consensus core's wire
mapping speaks (`bus.raft.wire.VERSIONS`); the peers are our own controllers, which negotiate it with
ApiVersions. Fetch here is the raft Fetch of `__cluster_metadata`-0 only: clients' fetches go to the
client listeners, which this table never sees.
"""

from __future__ import annotations

import functools

from bus.broker.apis import ApiHandler, handler_table

MODULES = (
    "fetch",
    "api_versions",
    "sasl_handshake",
    "sasl_authenticate",
    "vote",
    "begin_quorum_epoch",
    "end_quorum_epoch",
    "describe_quorum",
    "fetch_snapshot",
    "envelope",
    "broker_registration",
    "broker_heartbeat",
    "allocate_producer_ids",
    "alter_partition",
)


@functools.cache
def handlers() -> dict[int, ApiHandler]:
    """The controller listener's handlers by API key (its KafkaApis dispatches on it, ApiVersions lists it)."""
    return handler_table(__name__, MODULES)
