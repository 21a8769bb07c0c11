"""The nemesis' schedule: seeded, one fault at a time, every fault healed before the next."""

from __future__ import annotations

import random

import pytest

from deploy.chaos.nemesis import FAULTS, Nemesis


class Recorder:
    """Hosts that only write down what was done to them, and check that faults never overlap."""

    node_ids = (1, 2, 3)

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.open: str | None = None

    def _apply(self, what: str) -> None:
        assert self.open is None, f"{what} while {self.open} is not healed"
        self.open = what
        self.calls.append(what)

    def _heal(self, what: str) -> None:
        assert self.open is not None and self.open.split()[1:] == what.split()[1:], (self.open, what)
        self.open = None
        self.calls.append(what)

    def kill(self, node_id: int) -> None:
        self._apply(f"kill {node_id}")

    def restart(self, node_id: int) -> None:
        self._heal(f"restart {node_id}")

    def pause(self, node_id: int) -> None:
        self._apply(f"pause {node_id}")

    def resume(self, node_id: int) -> None:
        self._heal(f"resume {node_id}")

    def link_down(self, node_id: int) -> None:
        self._apply(f"down {node_id}")

    def link_up(self, node_id: int) -> None:
        self._heal(f"up {node_id}")

    def partition(self, a: int, b: int) -> None:
        assert a != b
        self._apply(f"partition {a} {b}")

    def heal(self, a: int, b: int) -> None:
        self._heal(f"heal {a} {b}")

    def step_clock(self, node_id: int, skew: int) -> None:
        assert self.open == f"kill {node_id}" and -10 <= skew <= 10, (self.open, skew)
        self.calls.append(f"clock {node_id} {skew:+d}")


def schedule(seed: int, strikes: int = 40) -> tuple[list[str], list[float]]:
    hosts, slept = Recorder(), []
    nemesis = Nemesis(hosts, random.Random(seed))
    for _ in range(strikes):
        nemesis.strike(slept.append)
    assert hosts.open is None
    return hosts.calls, slept


def test_the_same_seed_gives_the_same_schedule_and_every_fault_kind_shows_up() -> None:
    calls, slept = schedule(7)
    assert (calls, slept) == schedule(7)
    assert calls != schedule(8)[0]
    kinds = {call.split()[0] for call in calls if call.split()[0] not in ("restart", "resume", "up", "heal")}
    assert kinds == {"kill", "pause", "down", "partition", "clock"}, kinds
    assert len(FAULTS) == 5 and all(0.999 <= s <= 6.0 for s in slept)


def test_an_unknown_fault_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown fault 'flood'"):
        Nemesis(Recorder(), random.Random(1), faults=("flood",)).strike(lambda _s: None)
