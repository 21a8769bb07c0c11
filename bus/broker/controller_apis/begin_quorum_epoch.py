"""BeginQuorumEpoch (53): a new leader announces its epoch to the voters."""

from __future__ import annotations

from bus.broker.controller_apis._raft import answer
from bus.raft.wire import BEGIN_QUORUM_EPOCH, VERSIONS

API_KEY = BEGIN_QUORUM_EPOCH
MIN_VERSION = MAX_VERSION = VERSIONS[BEGIN_QUORUM_EPOCH]

handle = answer
