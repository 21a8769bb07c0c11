"""Login, bearer tokens, sessions, logout and the CSRF guard, through a real console process."""

from __future__ import annotations

import httpx

from tests.web.conftest import ConsoleProcess, password_of


def test_token_then_me(console: ConsoleProcess) -> None:
    response = console.login("operator")
    assert response.status_code == 200
    body = response.json()
    assert body["token_type"] == "bearer" and body["access_token"]
    me = httpx.get(f"{console.url}/api/v1/auth/me", headers={"Authorization": f"Bearer {body['access_token']}"})
    assert me.json() == {"username": "operator", "role": "operator"}


def test_wrong_password_and_unknown_user_are_the_same_401(console: ConsoleProcess) -> None:
    wrong = console.login("viewer", "not-the-password")
    unknown = console.login("nobody-at-all", "whatever-password")
    assert wrong.status_code == unknown.status_code == 401
    assert wrong.json() == unknown.json() == {"detail": "wrong username or password"}


def test_missing_and_bad_credentials_are_401_with_www_authenticate(console: ConsoleProcess) -> None:
    for headers in ({}, {"Authorization": "Bearer not.a.token"}, {"Authorization": "Basic dXNlcjpwdw=="}):
        response = httpx.get(f"{console.url}/api/v1/auth/me", headers=headers)
        assert response.status_code == 401, headers
        assert response.headers["www-authenticate"] == "Bearer"
    cookie = httpx.get(f"{console.url}/api/v1/auth/me", cookies={"console_session": "forged"})
    assert cookie.status_code == 401


def test_login_form_fields_are_required(console: ConsoleProcess) -> None:
    response = httpx.post(f"{console.url}/api/v1/auth/token", data={"username": "viewer"})
    assert response.status_code == 422
    assert any(error["loc"][-1] == "password" for error in response.json()["detail"])


def test_session_cookie_login_me_logout(console: ConsoleProcess) -> None:
    with httpx.Client(base_url=console.url) as browser:
        response = browser.post("/api/v1/auth/session", data={"username": "viewer", "password": password_of("viewer")})
        assert response.status_code == 200
        set_cookie = response.headers["set-cookie"].lower()
        assert "httponly" in set_cookie and "samesite=strict" in set_cookie
        assert browser.get("/api/v1/auth/me").json()["username"] == "viewer"
        stolen = dict(browser.cookies)
        assert browser.post("/api/v1/auth/logout").status_code == 403  # cookie POST without the CSRF header
        assert browser.post("/api/v1/auth/logout", headers={"X-Requested-With": "console"}).status_code == 204
        assert browser.get("/api/v1/auth/me").status_code == 401
    # The session is gone on the server, not only from this browser's jar.
    assert httpx.get(f"{console.url}/api/v1/auth/me", cookies=stolen).status_code == 401


def test_cookie_state_change_needs_csrf_header_bearer_does_not(console: ConsoleProcess) -> None:
    body = {"username": "csrf-user", "password": "long-enough-pw", "role": "viewer"}
    with httpx.Client(base_url=console.url) as browser:
        browser.post("/api/v1/auth/session", data={"username": "admin", "password": password_of("admin")})
        refused = browser.post("/api/v1/users", json=body)
        assert refused.status_code == 403 and "X-Requested-With" in refused.json()["detail"]
        assert browser.get("/api/v1/users").status_code == 200  # reads need no header
        created = browser.post("/api/v1/users", json=body, headers={"X-Requested-With": "console"})
        assert created.status_code == 201
    admin = console.client("admin")
    assert admin.delete("/api/v1/users/csrf-user").status_code == 204
