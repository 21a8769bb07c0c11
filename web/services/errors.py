"""What a service refuses, said without HTTP: routers turn these into 404 / 409 / 422."""

from __future__ import annotations


class NotFound(LookupError):
    """The named thing (topic, group, record, checkpoint) does not exist."""

    def __init__(self, what: str, name: str) -> None:
        super().__init__(f"{what} not found: {name}")
        self.what = what
        self.name = name


class Conflict(RuntimeError):
    """The command cannot run in the current state (a topic that exists, a group with active members)."""


class Invalid(ValueError):
    """A request field the backend refused (or that only makes sense with another one); names the field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
