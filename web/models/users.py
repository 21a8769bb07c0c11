"""``/api/v1/users``: create, list and remove console users (admin)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from web.auth.passwords import MAX_LENGTH, MIN_LENGTH
from web.auth.roles import Role
from web.auth.users import USERNAME_RE


class UserCreate(BaseModel):
    username: str = Field(pattern=f"^{USERNAME_RE.pattern}$")
    password: str = Field(min_length=MIN_LENGTH, max_length=MAX_LENGTH)
    role: Role


class UserInfo(BaseModel):
    username: str
    role: Role
    created: str
