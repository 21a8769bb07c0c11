"""What a service refuses, said without HTTP: routers turn these into 404 / 409 / 422, the app Forbidden into 403."""

from __future__ import annotations

from ..settings import PRINCIPAL


class NotFound(LookupError):
    """The named thing (topic, group, record, checkpoint) does not exist."""

    def __init__(self, what: str, name: str) -> None:
        super().__init__(f"{what} not found: {name}")
        self.what = what
        self.name = name


class Conflict(RuntimeError):
    """The command cannot run in the current state (a topic that exists, a group with active members)."""


class Forbidden(PermissionError):
    """The bus's ACLs refuse the console's own bus identity ``operation`` (``error``: Kafka's error name): no user
    of the console may do it, whatever their role, until the bus's admin grants it."""

    def __init__(self, operation: str, error: str) -> None:
        super().__init__(f"the console's bus identity (User:{PRINCIPAL}) may not {operation}: the bus refuses it "
                         f"({error})")
        self.operation = operation
        self.error = error


class Invalid(ValueError):
    """A request field the backend refused (or that only makes sense with another one); names the field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
