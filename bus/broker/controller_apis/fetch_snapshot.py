"""FetchSnapshot (59): a follower behind the log start pulls the leader's snapshot."""

from __future__ import annotations

from bus.broker.controller_apis._raft import answer
from bus.raft.wire import FETCH_SNAPSHOT, VERSIONS

API_KEY = FETCH_SNAPSHOT
MIN_VERSION = MAX_VERSION = VERSIONS[FETCH_SNAPSHOT]

handle = answer
