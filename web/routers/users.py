"""``/api/v1/users`` (admin): list, create and remove console users; every change is audited."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Path, status

from web.auth import Role
from web.auth.users import USERNAME_RE, UserExists
from web.dependencies import AdminDep, AuditDep, AuthDep, require_role
from web.models.users import UserCreate, UserInfo

router = APIRouter(prefix="/api/v1/users", tags=["users"], dependencies=[Depends(require_role(Role.ADMIN))])


@router.get("", response_model=list[UserInfo])
def list_users(auth: AuthDep) -> list[UserInfo]:
    return [UserInfo(username=u.username, role=u.role, created=u.created) for u in auth.users.list()]


@router.post("", response_model=UserInfo, status_code=status.HTTP_201_CREATED)
def create_user(body: UserCreate, user: AdminDep, auth: AuthDep, audit: AuditDep) -> UserInfo:
    detail = {"role": body.role.value}
    try:
        created = auth.users.create(body.username, body.password, body.role.value)
    except UserExists:
        audit.record(user, "user.add", body.username, detail, "refused: exists")
        raise HTTPException(status.HTTP_409_CONFLICT, f"user {body.username!r} already exists") from None
    audit.record(user, "user.add", body.username, detail)
    return UserInfo(username=created.username, role=created.role, created=created.created)


@router.delete("/{username}", status_code=status.HTTP_204_NO_CONTENT)
def remove_user(username: Annotated[str, Path(pattern=f"^{USERNAME_RE.pattern}$")], user: AdminDep, auth: AuthDep,
                audit: AuditDep) -> None:
    if username == user.username:
        raise HTTPException(status.HTTP_409_CONFLICT, "an admin cannot remove their own account")
    if not auth.users.remove(username):
        audit.record(user, "user.remove", username, {}, "refused: no such user")
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no user {username!r}")
    audit.record(user, "user.remove", username)
