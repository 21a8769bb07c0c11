"""The persisted election state: Kafka's `quorum-state` file (FileQuorumStateStore, QuorumStateData v0).

Raft is only safe if a voter never votes twice in an epoch and never goes back in epoch, across
restarts: the core writes this state (and waits for it to be durable) before it replies to a vote or
acts in a new epoch. The file is JSON with Kafka's field names:

    {"clusterId":"","leaderId":1,"leaderEpoch":5,"votedId":-1,"appliedOffset":0,
     "currentVoters":[{"voterId":1},{"voterId":2},{"voterId":3}],"data_version":0}

It is replaced atomically (temp file, fsync, rename, fsync of the directory), so a crash leaves either
the old or the new state. A file that cannot be read back is an error naming the file, never a silent
reset to epoch 0 (that would let this node vote again in epochs it has voted in).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

FILE_NAME = "quorum-state"
DATA_VERSION = 0
NO_ID = -1


class QuorumStateError(Exception):
    """The stored quorum state is unreadable or contradicts the configuration."""


@dataclass(frozen=True, slots=True)
class ElectionState:
    """Epoch, the leader known for it (or -1) and the candidate voted for in it (or -1)."""

    epoch: int
    leader_id: int = NO_ID
    voted_id: int = NO_ID
    voters: frozenset[int] = frozenset()

    def __post_init__(self) -> None:
        if self.epoch < 0:
            raise QuorumStateError(f"negative epoch {self.epoch}")


class QuorumStateStore(Protocol):
    """Where the election state lives: `read` gives None before the first write."""

    def read(self) -> ElectionState | None: ...

    def write(self, state: ElectionState) -> None: ...


class MemoryQuorumStateStore:
    """The store for the simulation and tests: survives a simulated crash as the file would."""

    def __init__(self) -> None:
        self.state: ElectionState | None = None
        self.writes = 0

    def read(self) -> ElectionState | None:
        return self.state

    def write(self, state: ElectionState) -> None:
        self.state = state
        self.writes += 1


class FileQuorumStateStore:
    """The `quorum-state` file in the metadata log directory."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / FILE_NAME

    def read(self) -> ElectionState | None:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        try:
            data = json.loads(text)
            if not isinstance(data, dict):
                raise TypeError("not a JSON object")
            version = data.get("data_version", DATA_VERSION)
            if version != DATA_VERSION:
                raise QuorumStateError(f"{self.path}: unsupported data_version {version}")
            voters = frozenset(_int(entry["voterId"]) for entry in data.get("currentVoters") or ())
            return ElectionState(
                epoch=_int(data["leaderEpoch"]),
                leader_id=_int(data["leaderId"]),
                voted_id=_int(data["votedId"]),
                voters=voters,
            )
        except QuorumStateError as exc:
            raise QuorumStateError(f"{self.path}: {exc}") from exc
        except (ValueError, TypeError, KeyError) as exc:
            raise QuorumStateError(f"{self.path} is corrupt ({exc!r}); refusing to start from an empty state") from exc

    def write(self, state: ElectionState) -> None:
        data = {
            "clusterId": "",
            "leaderId": state.leader_id,
            "leaderEpoch": state.epoch,
            "votedId": state.voted_id,
            "appliedOffset": 0,
            "currentVoters": [{"voterId": voter} for voter in sorted(state.voters)],
            "data_version": DATA_VERSION,
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temp = self.path.with_name(FILE_NAME + ".tmp")
        with open(temp, "w", encoding="utf-8") as handle:
            json.dump(data, handle, separators=(",", ":"))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, self.path)
        directory = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)


def _int(value: object) -> int:
    # bool is an int in Python but never a valid id or epoch in this file.
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"expected an integer, got {value!r}")
    return value
