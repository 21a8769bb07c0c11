"""Bad input to the auth, users and audit routes of a real console: 4xx naming the problem, never a 5xx."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deploy.processes.console import ConsoleProcess

FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
json_values = st.recursive(scalars,
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
                           max_leaves=8)


def test_unknown_routes_are_404_and_wrong_methods_405(console: ConsoleProcess) -> None:
    client = console.client("admin")
    for path in ("/api/v1/nope", "/api/v1/users/a/b", "/api/v2/users", "/api/v1/auth/nope"):
        assert client.get(path).status_code == 404, path
    assert client.put("/api/v1/users").status_code == 405
    assert client.get("/api/v1/auth/token").status_code == 405


@FUZZ
@given(body=st.dictionaries(st.sampled_from(["username", "password", "role", "other"]), json_values) | json_values)
def test_fuzzed_user_bodies(console: ConsoleProcess, body: Any) -> None:
    response = console.client("admin").post("/api/v1/users", json=body)
    assert response.status_code in (201, 409, 422), response.text
    if response.status_code == 422:
        assert all(error["loc"][0] == "body" for error in response.json()["detail"])
    if response.status_code == 201:
        assert console.client("admin").delete(f"/api/v1/users/{body['username']}").status_code == 204


@FUZZ
@given(form=st.dictionaries(st.sampled_from(["username", "password", "grant_type", "scope"]), st.text(max_size=300)))
def test_fuzzed_logins(console: ConsoleProcess, form: dict[str, str]) -> None:
    client = console.client(None)
    for path in ("/api/v1/auth/token", "/api/v1/auth/session"):
        response = client.post(path, data=form)
        assert response.status_code in (401, 422, 429), response.text


@FUZZ
@given(params=st.dictionaries(st.sampled_from(["limit", "cursor", "x"]), st.text(max_size=120)),
       name=st.text(min_size=1, max_size=80))
def test_fuzzed_audit_queries_and_user_paths(console: ConsoleProcess, params: dict[str, str], name: str) -> None:
    admin = console.client("admin")
    assert admin.get("/api/v1/audit", params=params).status_code in (200, 422)
    assert admin.delete(f"/api/v1/users/{quote(name, safe='')}").status_code in (404, 405, 409, 422, 307, 200)


def test_garbage_bodies(console: ConsoleProcess) -> None:
    admin = console.client("admin")
    for content, kind in ((b"\xff\xfe\x00", "application/json"), (b"[" * 10000, "application/json"),
                          (b"username=a&password=b", "application/x-www-form-urlencoded"),
                          (b"x" * 100_000, "text/plain")):
        response = admin.post("/api/v1/users", content=content, headers={"Content-Type": kind})
        # 400 for a body that is not text at all (FastAPI cannot decode it), 422 for the wrong JSON.
        assert response.status_code in (400, 422), (content[:20], response.status_code)
        assert response.json()["detail"]
    token = console.client(None).post("/api/v1/auth/token", content=b"\xff\xfe&&==",
                                      headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert token.status_code in (400, 422)
    huge = console.client(None).get("/api/v1/auth/me", headers={"Authorization": "Bearer " + "a" * 8000})
    assert huge.status_code == 401
