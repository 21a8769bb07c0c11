"""Fetch (1) of __cluster_metadata-0: a follower or observer pulls the metadata log from the leader."""

from __future__ import annotations

from bus.broker.controller_apis._raft import answer
from bus.raft.wire import FETCH, VERSIONS

API_KEY = FETCH
MIN_VERSION = MAX_VERSION = VERSIONS[FETCH]

handle = answer
