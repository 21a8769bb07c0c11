"""EndQuorumEpoch (54): a resigning leader names its preferred successors."""

from __future__ import annotations

from bus.broker.controller_apis._raft import answer
from bus.raft.wire import END_QUORUM_EPOCH, VERSIONS

API_KEY = END_QUORUM_EPOCH
MIN_VERSION = MAX_VERSION = VERSIONS[END_QUORUM_EPOCH]

handle = answer
