"""``GET /api/v1/audit``: the audit trail, newest first, a page at a time, filtered."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


class AuditEntry(BaseModel):
    time: str
    """ISO-8601 UTC, milliseconds."""
    user: str
    role: str = ""
    action: str
    target: str = ""
    query: dict[str, Any] = {}
    """What was asked (parameters or body), never what was answered."""
    reason: str | None = None
    """Why, as the user gave it (required for searches by plate or face and for video export)."""
    client: str = ""
    user_agent: str = ""
    outcome: str


class AuditPage(BaseModel):
    items: list[AuditEntry]
    next: str | None
    """Opaque cursor of the next (older) page, or null at the end."""
