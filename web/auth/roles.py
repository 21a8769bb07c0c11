"""The console's roles, ordered: each one may do everything the ones below it may."""

from __future__ import annotations

from enum import StrEnum


class Role(StrEnum):
    VIEWER = "viewer"
    OPERATOR = "operator"
    ADMIN = "admin"

    @property
    def rank(self) -> int:
        return _ORDER.index(self)

    def allows(self, required: Role) -> bool:
        return self.rank >= required.rank


_ORDER = (Role.VIEWER, Role.OPERATOR, Role.ADMIN)
