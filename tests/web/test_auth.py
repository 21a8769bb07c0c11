"""Login, bearer tokens, sessions, logout and the CSRF guard, through a real console process."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx

from deploy.processes.console import ConsoleProcess, password_of


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


def test_repeated_failures_lock_the_name_with_growing_retry_after(console: ConsoleProcess) -> None:
    admin = console.client("admin")
    assert admin.post("/api/v1/users", json={"username": "throttled", "password": password_of("throttled"),
                                             "role": "viewer"}).status_code == 201
    for _ in range(4):
        assert console.login("throttled", "wrong-password").status_code == 401
    fifth = console.login("throttled", "wrong-password")
    assert fifth.status_code == 429 and fifth.headers["retry-after"] == "1"
    # During the lock even the right password is refused, without being checked.
    assert console.login("throttled").status_code == 429
    assert console.login("viewer").status_code == 200  # other names are not affected
    time.sleep(1.1)
    sixth = console.login("throttled", "wrong-password")
    assert sixth.status_code == 429 and sixth.headers["retry-after"] == "2"  # exponential: 1, 2, 4, ...
    time.sleep(2.1)
    assert console.login("throttled").status_code == 200  # success resets the count
    assert console.login("throttled", "wrong-password").status_code == 401


def test_token_expires(make_console: Callable[..., ConsoleProcess]) -> None:
    short = make_console(token_ttl_s=2)
    response = short.login("viewer")
    assert response.json()["expires_in"] == 2
    headers = {"Authorization": f"Bearer {response.json()['access_token']}"}
    assert httpx.get(f"{short.url}/api/v1/auth/me", headers=headers).status_code == 200
    time.sleep(3.1)
    expired = httpx.get(f"{short.url}/api/v1/auth/me", headers=headers)
    assert expired.status_code == 401 and expired.json()["detail"] == "invalid or expired token"


def test_token_of_another_console_key_is_refused(console: ConsoleProcess,
                                                 make_console: Callable[..., ConsoleProcess]) -> None:
    other = make_console()  # its own data dir, so its own signing key
    headers = {"Authorization": f"Bearer {other.token('viewer')}"}
    assert httpx.get(f"{console.url}/api/v1/auth/me", headers=headers).status_code == 401
    key = other.data_dir / "signing_key"
    assert key.stat().st_mode & 0o777 == 0o600


def test_removed_user_tokens_and_sessions_stop_working(console: ConsoleProcess) -> None:
    admin = console.client("admin")
    body = {"username": "ephemeral", "password": password_of("ephemeral"), "role": "operator"}
    assert admin.post("/api/v1/users", json=body).status_code == 201
    token = console.login("ephemeral").json()["access_token"]
    bearer = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=console.url) as browser:
        browser.post("/api/v1/auth/session", data={"username": "ephemeral", "password": password_of("ephemeral")})
        assert browser.get("/api/v1/auth/me").status_code == 200
        assert httpx.get(f"{console.url}/api/v1/auth/me", headers=bearer).status_code == 200
        assert admin.delete("/api/v1/users/ephemeral").status_code == 204
        assert httpx.get(f"{console.url}/api/v1/auth/me", headers=bearer).status_code == 401
        assert browser.get("/api/v1/auth/me").status_code == 401
        # Re-adding the same name does not revive what was issued before.
        assert admin.post("/api/v1/users", json=body).status_code == 201
        assert httpx.get(f"{console.url}/api/v1/auth/me", headers=bearer).status_code == 401
        assert browser.get("/api/v1/auth/me").status_code == 401
    assert admin.delete("/api/v1/users/ephemeral").status_code == 204
