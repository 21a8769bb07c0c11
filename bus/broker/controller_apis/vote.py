"""Vote (52): a candidate asks for this voter's vote in its epoch."""

from __future__ import annotations

from bus.broker.controller_apis._raft import answer
from bus.raft.wire import VERSIONS, VOTE

API_KEY = VOTE
MIN_VERSION = MAX_VERSION = VERSIONS[VOTE]

handle = answer
