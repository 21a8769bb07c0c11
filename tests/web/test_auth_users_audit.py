"""``/api/v1/users`` and ``/api/v1/audit`` (admin) through a real console: validation, conflicts, the trail."""

from __future__ import annotations

import uuid

from deploy.processes.console import ConsoleProcess, password_of


def test_list_create_conflict_remove(console: ConsoleProcess) -> None:
    admin = console.client("admin")
    names = {u["username"]: u["role"] for u in admin.get("/api/v1/users").json()}
    assert {"viewer": "viewer", "operator": "operator", "admin": "admin"}.items() <= names.items()
    body = {"username": "alice", "password": password_of("alice"), "role": "operator"}
    created = admin.post("/api/v1/users", json=body)
    assert created.status_code == 201 and created.json()["role"] == "operator"
    assert console.login("alice").status_code == 200
    conflict = admin.post("/api/v1/users", json=body)
    assert conflict.status_code == 409 and "alice" in conflict.json()["detail"]
    assert admin.delete("/api/v1/users/alice").status_code == 204
    assert admin.delete("/api/v1/users/alice").status_code == 404
    assert admin.delete("/api/v1/users/admin").status_code == 409  # an admin cannot lock themself out


def test_invalid_user_bodies_name_the_field(console: ConsoleProcess) -> None:
    admin = console.client("admin")
    good = {"username": "bob", "password": "long-enough-pw", "role": "viewer"}
    cases = {"role": {**good, "role": "root"}, "password": {**good, "password": "short"},
             "username": {**good, "username": "<script>"}}
    for field, body in cases.items():
        response = admin.post("/api/v1/users", json=body)
        assert response.status_code == 422, body
        assert [e["loc"] for e in response.json()["detail"]] == [["body", field]]
    missing = admin.post("/api/v1/users", json={"username": "bob"})
    assert {tuple(e["loc"]) for e in missing.json()["detail"]} == {("body", "password"), ("body", "role")}
    assert admin.post("/api/v1/users", content=b"{not json", headers={"Content-Type": "application/json"}
                      ).status_code == 422
    assert admin.delete("/api/v1/users/bad%20name").status_code == 422


def test_audit_trail_newest_first_with_cursor(console: ConsoleProcess) -> None:
    admin = console.client("admin")
    tag = uuid.uuid4().hex[:8]
    names = [f"audit-{tag}-{n}" for n in range(3)]
    for name in names:
        assert admin.post("/api/v1/users", json={"username": name, "password": password_of(name),
                                                 "role": "viewer"}).status_code == 201
    admin.post("/api/v1/users", json={"username": names[0], "password": password_of(names[0]), "role": "viewer"})
    assert admin.delete(f"/api/v1/users/{names[1]}").status_code == 204

    console.audit(lambda found: len(found) == 5, q=tag)  # through the bus and the audit loader
    entries: list[dict] = []
    cursor = None
    pages = 0
    while True:
        page = admin.get("/api/v1/audit", params={"limit": 2, "q": tag,
                                                  **({"cursor": cursor} if cursor else {})}).json()
        assert len(page["items"]) <= 2
        entries += page["items"]
        pages += 1
        cursor = page["next"]
        if cursor is None:
            break
    assert pages >= 3
    times = [e["time"] for e in entries]
    assert times == sorted(times, reverse=True)
    ours = [(e["action"], e["target"], e["outcome"], e["user"]) for e in entries if tag in e["target"]]
    assert ours == [("user.remove", names[1], "ok", "admin"),
                    ("user.add", names[0], "refused: exists", "admin"),
                    ("user.add", names[2], "ok", "admin"),
                    ("user.add", names[1], "ok", "admin"),
                    ("user.add", names[0], "ok", "admin")]
    details = [e["query"] for e in entries if tag in e["target"]]
    assert details == [{}] + [{"role": "viewer"}] * 4


def test_audit_bad_cursor_and_limit_are_422(console: ConsoleProcess) -> None:
    admin = console.client("admin")
    for params, field in (({"cursor": "!!!"}, "cursor"), ({"limit": 0}, "limit"), ({"limit": "many"}, "limit")):
        response = admin.get("/api/v1/audit", params=params)
        assert response.status_code == 422, params
        assert response.json()["detail"][0]["loc"] == ["query", field]
