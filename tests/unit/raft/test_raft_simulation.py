"""Randomized, deterministic fault simulation of 3- and 5-voter quorums (see sim.py for what is checked).

RAFT_SEEDS=500 runs more seeds locally; a failure names its seed, and Simulation(seed, ...) replays it.
"""

import os

import pytest

from tests.unit.raft.sim import Simulation

SEEDS = int(os.environ.get("RAFT_SEEDS", "50"))


@pytest.mark.parametrize("seed", range(SEEDS))
def test_quorum_survives_faults(seed: int) -> None:
    voters = 3 if seed % 2 == 0 else 5
    sim = Simulation(seed, voters=voters, observers=seed % 3 == 0)
    sim.run(4000)
    recovery_ms = sim.run_until_progress(limit_ms=5000)
    assert recovery_ms < 5000
    assert sim.committed, f"seed {seed}: nothing was ever committed"
