"""Login and the current user."""

from __future__ import annotations

from pydantic import BaseModel

from web.auth.roles import Role


class UserOut(BaseModel):
    """Who is calling: what ``require_role`` dependencies hand to a route."""

    username: str
    role: Role


class Token(BaseModel):
    access_token: str
    token_type: str = "bearer"
    expires_in: int
