"""``GET /api/v1/audit``: the audit trail, newest first, a page at a time."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


class AuditEntry(BaseModel):
    time: str
    user: str
    action: str
    target: str
    detail: dict[str, Any]
    outcome: str


class AuditPage(BaseModel):
    items: list[AuditEntry]
    next: str | None
    """Opaque cursor of the next (older) page, or null at the end."""
