"""DescribeQuorum (55) on the controller listener: answered by the leader only, as KRaft does."""

from __future__ import annotations

from bus.broker.controller_apis._raft import answer
from bus.raft.wire import DESCRIBE_QUORUM, VERSIONS

API_KEY = DESCRIBE_QUORUM
MIN_VERSION = MAX_VERSION = VERSIONS[DESCRIBE_QUORUM]

handle = answer
