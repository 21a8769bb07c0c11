"""Every ``/api/v1`` route x every caller (none, viewer, operator, admin) against a real console.

The routes come from the app itself, so a route added without a role fails here: each must declare
``require_role`` (through ViewerDep/OperatorDep/AdminDep) unless it is one of the public ones, and
the running console must then answer 401 without credentials, 403 below the role, and neither (nor a
5xx) at or above it. The shared console has no object store or DR mirror behind it: a 503 that names the
unreachable backend is the console's documented answer there, never a crash.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.routing import iter_route_contexts

from contracts.config import load
from deploy.processes.console import ConsoleProcess
from tests.web.conftest import ROLES
from web.app import create_app
from web.auth.roles import Role
from web.settings import ConsoleSettings

PUBLIC = {("GET", "/api/v1/health"), ("POST", "/api/v1/auth/token"), ("POST", "/api/v1/auth/session"),
          ("POST", "/api/v1/auth/logout")}
STREAMING = {("GET", "/api/v1/events")}


def _required_role(dependant: Any) -> Role | None:
    for dependency in dependant.dependencies:
        role = getattr(dependency.call, "required_role", None) or _required_role(dependency)
        if role is not None:
            return role
    return None


def api_routes(console: ConsoleProcess) -> Iterator[tuple[str, str, Role | None]]:
    app = create_app(ConsoleSettings.from_config(load(console.config)))
    for context in iter_route_contexts(app.routes):
        if not context.path.startswith("/api/v1/") or not context.methods:
            continue
        dependant = getattr(context.route, "dependant", None)
        role = _required_role(dependant) if dependant is not None else None
        for method in sorted(context.methods - {"HEAD"}):
            yield method, context.path, role


def test_every_api_route_declares_a_role(console: ConsoleProcess) -> None:
    routes = list(api_routes(console))
    assert len(routes) > len(PUBLIC)
    undeclared = [(m, p) for m, p, role in routes if role is None and (m, p) not in PUBLIC]
    assert not undeclared, f"API routes without require_role: {undeclared}"


def _call(console: ConsoleProcess, caller: str | None, method: str, path: str) -> int:
    """The status; a 503 naming its backend counts as 200 (served, only its backend was down)."""
    url = re.sub(r"\{[^}]+\}", "x", path)
    client = console.client(caller)
    body = {"json": {}} if method in {"POST", "PUT", "PATCH"} else {}
    if (method, path) in STREAMING:
        with client.stream(method, url, timeout=10) as response:
            return response.status_code
    response = client.request(method, url, **body)
    if response.status_code == 503 and isinstance(response.json(), dict) and response.json().get("backend"):
        return 200
    return response.status_code


@pytest.mark.parametrize("caller", [None, *ROLES])
def test_roles_matrix(console: ConsoleProcess, caller: str | None) -> None:
    wrong: list[str] = []
    for method, path, role in api_routes(console):
        status = _call(console, caller, method, path)
        if role is None:
            expected = "not 401/403/5xx"
            ok = status not in (401, 403) and status < 500
        elif caller is None:
            expected, ok = "401", status == 401
        elif not Role(caller).allows(role):
            expected, ok = "403", status == 403
        else:
            expected = "not 401/403/5xx"
            ok = status not in (401, 403) and status < 500
        if not ok:
            wrong.append(f"{method} {path} as {caller or 'anonymous'} (needs {role}): {status}, expected {expected}")
    assert not wrong, "\n".join(wrong)
