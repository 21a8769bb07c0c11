"""What every command contract raises on a value it refuses (watch, statistic and video commands).

The console answers it as a 422 naming ``field``; the services that consume the command topics reply or
fail the task with the same ``field: reason``, so an operator reads one message wherever it surfaces.
"""

from __future__ import annotations


class CommandError(ValueError):
    """A command that cannot be carried out: ``field`` names what is wrong, ``reason`` says how."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason
