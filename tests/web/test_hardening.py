"""The console hardened (issue 27, item 7), each fix against a real console process: no open redirect after
login, a login throttle per address and name, event streams that end with their session, ``/docs`` from the
console's own assets, an access log without query strings, ``/metrics`` for loopback or an admin, no face
feature vectors nor control topics for viewers, and HTTPS from ``[console] tls_cert`` / ``tls_key``.

(The media and transcode limits need an object store: ``test_hardening_video.py``.)
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urljoin, urlsplit

import httpx
import pytest
from confluent_kafka import Producer
from cryptography.x509.oid import NameOID
from playwright.sync_api import Browser, Page, expect

from contracts.ports import free_port
from contracts.processes import spawn
from contracts.records import Kind
from contracts.surveillance import WatchCommand
from deploy.pki import Authority, name, write_private
from deploy.processes.console import Backing, ConsoleProcess, password_of, write_config
from testkit.web_data import T0, StepClock, load, valid_records
from tests.web.test_browser import ARTIFACTS, Watch, browser  # noqa: F401 - the browser fixture
from tests.web.test_events import hub_follows, produce, read_events, wait_for_clients

CSRF = {"X-Requested-With": "console"}
T = TypeVar("T")


def outside_address() -> str:
    """This machine's address on its network (not loopback): a client the console sees as remote."""
    for family, _, _, _, address in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET):
        if family == socket.AF_INET and not address[0].startswith("127."):
            return address[0]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # no packet is sent: only the route's source address is chosen
            address = probe.getsockname()[0]
        except OSError:
            address = ""
    if not address or address.startswith("127."):
        pytest.skip("this machine has no non-loopback IPv4 address")
    return address


def remote(console: ConsoleProcess, **kwargs: Any) -> httpx.Client:
    """A client reaching the console through the machine's network address (the console must listen on 0.0.0.0)."""
    return httpx.Client(base_url=f"http://{outside_address()}:{console.port}", timeout=30, trust_env=False, **kwargs)


def run_async(scenario: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """``asyncio.run`` on a thread of its own: Playwright's sync API keeps an event loop on this one."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(lambda: asyncio.run(scenario())).result()


def add_user(console: ConsoleProcess, username: str, role: str) -> None:
    response = console.client("admin").post("/api/v1/users", json={"username": username, "role": role,
                                                                    "password": password_of(username)})
    assert response.status_code == 201, response.text


# -- 1. no open redirect after login --------------------------------------------------------------------------
OFF_SITE = ["/%09/evil.example", "/%0A/evil.example", "/%0d/evil.example", "//evil.example", "https://evil.example",
            "/%5Cevil.example", "/%5C%5Cevil.example", "%2F%2Fevil.example", "/%2F/evil.example",
            "http:evil.example", "%20//evil.example", "/%09%09/evil.example", "/%00/evil.example",
            "javascript:alert(1)", "/\\evil.example", "\\\\evil.example", "/%E3%80%80/evil.example"]


def page_data(html: str) -> dict[str, Any]:
    match = re.search(r'<script id="page-data" type="application/json">(.*?)</script>', html, re.S)
    assert match, "page-data missing"
    return json.loads(match.group(1))


def test_login_never_redirects_off_site(console: ConsoleProcess) -> None:
    with httpx.Client(base_url=console.url, timeout=30) as client:
        login = client.post("/api/v1/auth/session", data={"username": "viewer", "password": password_of("viewer")})
        assert login.status_code == 200
        for target in OFF_SITE:  # logged in: the server redirects itself
            for path in ("/login", "/lang/en"):
                response = client.get(f"{path}?next={target}")
                assert response.status_code == 303, (path, target)
                location = response.headers["location"]
                assert location == "/", (path, target, location)
                assert urlsplit(urljoin(console.url, location)).netloc == urlsplit(console.url).netloc
        same_site = client.get("/login?next=/bus%3Ftopic%3Dalerts")
        assert same_site.status_code == 303 and same_site.headers["location"] == "/bus?topic=alerts"
    with httpx.Client(base_url=console.url, timeout=30) as client:
        for target in OFF_SITE:  # not logged in: the page hands its script "/" as the target
            page = client.get(f"/login?next={target}")
            assert page.status_code == 200 and page_data(page.text)["next"] == "/", target
        assert page_data(client.get("/login?next=/captures%3Fplate%3Dx").text)["next"] == "/captures?plate=x"


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:  # noqa: F811 - the imported fixture
    """A chromium page; requests off 127.0.0.1 and uncaught exceptions fail the test."""
    context = browser.new_context(viewport={"width": 1280, "height": 900}, locale="en-US")
    page = context.new_page()
    watch = Watch()
    page.on("pageerror", lambda exc: watch.errors.append(f"uncaught: {exc}"))
    page.on("request", watch.on_request)
    page.set_default_timeout(20_000)
    yield page
    context.close()
    assert watch.outside == [], "requests left 127.0.0.1"
    assert watch.errors == []


def snap(page: Page, tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path), full_page=False)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shutil.copy(path, ARTIFACTS / path.name)
    return path


@pytest.mark.slow
def test_login_page_in_a_browser_stays_on_site(console: ConsoleProcess, page: Page, tmp_path: Path) -> None:
    """The login page's script goes where the server said: a hostile ``next`` lands on the overview."""
    page.goto(f"{console.url}/login?next=/%09/evil.example")
    page.fill("#username", "viewer")
    page.fill("#password", password_of("viewer"))
    page.click("#login-form button[type=submit]")
    page.wait_for_url(f"{console.url}/")
    assert urlsplit(page.url).netloc == urlsplit(console.url).netloc


# -- 4. login throttle per address and name --------------------------------------------------------------------
def test_failures_from_one_address_never_lock_the_owner_out_elsewhere(
        make_console: Callable[..., ConsoleProcess]) -> None:
    console = make_console(host="0.0.0.0", login_address_free_failures=8)
    add_user(console, "sprayed", "viewer")
    wrong = {"username": "sprayed", "password": "wrong-password"}
    with remote(console) as attacker:
        for _ in range(4):
            assert attacker.post("/api/v1/auth/token", data=wrong).status_code == 401
        locked = attacker.post("/api/v1/auth/token", data=wrong)
        assert locked.status_code == 429 and locked.headers["retry-after"] == "1"
        # The attacker's address is locked for that name, even with the right password ...
        assert attacker.post("/api/v1/auth/token", data={**wrong, "password": password_of("sprayed")}
                             ).status_code == 429
        # ... while the owner, from another address, logs in at once.
        assert console.login("sprayed").status_code == 200
        # Spraying other names from the same address: its 8th failure in all locks the address, whatever the name.
        time.sleep(1.1)
        statuses = [attacker.post("/api/v1/auth/token", data={"username": f"spray-{n}", "password": "guess-1"}
                                  ).status_code for n in range(3)]
        assert statuses == [401, 401, 429], statuses
        assert attacker.post("/api/v1/auth/token", data={"username": "viewer", "password": password_of("viewer")}
                             ).status_code == 429
    assert console.login("viewer").status_code == 200  # loopback is another address
    console.client("admin").delete("/api/v1/users/sprayed")


# -- 5. event streams end with their session ---------------------------------------------------------------------
async def stream_ends(url: str, within: float, **client: Any) -> list[str]:
    """Open ``/api/v1/events`` and return its lines once the server ends it (fails after ``within`` seconds)."""
    lines: list[str] = []
    async with httpx.AsyncClient(base_url=url, timeout=within + 30, **client) as http, \
            http.stream("GET", "/api/v1/events") as response:
        assert response.status_code == 200

        async def read() -> None:
            async for line in response.aiter_lines():
                lines.append(line)

        await asyncio.wait_for(read(), within)
    return lines


def test_event_streams_end_on_logout_and_on_user_removal(make_console: Callable[..., ConsoleProcess]) -> None:
    console = make_console(session_recheck_s=1)
    add_user(console, "sse-user", "operator")

    async def scenario() -> None:
        # A page's session cookie: the stream ends soon after that session logs out.
        with httpx.Client(base_url=console.url, timeout=30) as client:
            login = client.post("/api/v1/auth/session",
                                 data={"username": "viewer", "password": password_of("viewer")})
            assert login.status_code == 200
            cookies = dict(client.cookies)
            stream = asyncio.create_task(stream_ends(console.url, 20, cookies=cookies))
            await asyncio.sleep(1.5)
            assert not stream.done()
            assert (await asyncio.to_thread(client.post, "/api/v1/auth/logout", headers=CSRF)).status_code == 204
            started = time.monotonic()
            lines = await stream
            assert time.monotonic() - started < 10
            assert "event: closed" in lines
        # A bearer token: the stream ends once its user is removed (or re-made with another role: a new user).
        token = console.login("sse-user").json()["access_token"]
        stream = asyncio.create_task(stream_ends(console.url, 20, headers={"Authorization": f"Bearer {token}"}))
        await asyncio.sleep(1.5)
        assert not stream.done()
        removed = await asyncio.to_thread(console.client("admin").delete, "/api/v1/users/sse-user")
        assert removed.status_code == 204
        assert "event: closed" in await stream

    run_async(scenario)
    wait_for_clients(console, 0)  # the ended streams left the hub


# -- 6. /docs from the console's own assets ----------------------------------------------------------------------
def test_docs_use_local_swagger_assets(console: ConsoleProcess) -> None:
    client = console.client(None)
    docs = client.get("/docs")
    assert docs.status_code == 200 and "swagger-ui" in docs.text.lower()
    assert "cdn.jsdelivr" not in docs.text and "unpkg" not in docs.text
    urls = re.findall(r'(?:src|href)\s*=\s*["\']([^"\']+)["\']', docs.text)
    urls += re.findall(r"url:\s*['\"]([^'\"]+)['\"]", docs.text)
    assert urls, docs.text
    for url in urls:
        assert not re.match(r"(?i)^(https?:)?//", url), url
    scripts = re.findall(r'<script[^>]+src\s*=\s*["\']([^"\']+)', docs.text)
    styles = re.findall(r'<link[^>]+href\s*=\s*["\']([^"\']+)', docs.text)
    assert scripts and any(url.endswith(".css") for url in styles)
    for url in scripts + styles:
        response = client.get(url)
        assert response.status_code == 200, url
        if url.endswith((".js", ".css")):
            assert len(response.content) > 10_000, url  # Swagger UI itself, not a stub
    assert client.get("/docs/oauth2-redirect").status_code == 200


@pytest.mark.slow
def test_docs_render_offline_in_a_browser(console: ConsoleProcess, page: Page, tmp_path: Path) -> None:
    page.goto(f"{console.url}/docs")
    expect(page.locator(".swagger-ui .info .title")).to_contain_text("Security-video data bus console")
    expect(page.locator(".opblock-tag-section").first).to_be_visible()
    snap(page, tmp_path, "docs-local-swagger")


# -- 7. no query strings in the access log -----------------------------------------------------------------------
def test_access_log_has_no_query_strings(console: ConsoleProcess) -> None:
    marker = "QZ7X9"
    plate = f"浙A{marker}"
    response = console.client("viewer").get("/api/v1/captures", params={"plate": plate, "limit": 5,
                                                                        "reason": "case 7"})
    assert response.status_code in (200, 503), response.text
    deadline = time.monotonic() + 10
    while not any(re.search(r'"GET /api/v1/captures[? ]', m) for m in access_lines(console.log())):
        assert time.monotonic() < deadline, "the access log has no line for the search"
        time.sleep(0.2)
    log = console.log()
    assert marker not in log and "%E6%B5%99A" not in log and "plate=" not in log
    assert any('"GET /api/v1/captures HTTP/1.1" 200' in m for m in access_lines(log))


def access_lines(log: str) -> list[str]:
    """The messages of uvicorn's access log in the console's JSON log."""
    messages = []
    for line in log.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("logger") == "uvicorn.access":
            assert entry["service"] == "console"
            messages.append(entry["message"])
    return messages


# -- 8. /metrics for loopback clients or an admin ----------------------------------------------------------------
def test_metrics_for_loopback_or_an_admin_token(make_console: Callable[..., ConsoleProcess]) -> None:
    console = make_console(host="0.0.0.0")
    assert console.client(None).get("/metrics").status_code == 200  # the local Prometheus
    with remote(console) as outside:
        anonymous = outside.get("/metrics")
        assert anonymous.status_code == 401 and "console_http_requests_total" not in anonymous.text
        viewer = outside.get("/metrics", headers={"Authorization": f"Bearer {console.token('viewer')}"})
        assert viewer.status_code == 403
        bad = outside.get("/metrics", headers={"Authorization": "Bearer not-a-token"})
        assert bad.status_code == 401
        admin = outside.get("/metrics", headers={"Authorization": f"Bearer {console.token('admin')}"})
        assert admin.status_code == 200 and "console_http_requests_total" in admin.text
        assert outside.get("/api/v1/health").status_code == 200  # the rest of the console is as it was


# -- 9. viewers: no face feature vectors, no control topics --------------------------------------------------------
def test_viewer_gets_no_face_feature_from_capture_detail(console: ConsoleProcess) -> None:
    clock = StepClock(T0 - timedelta(days=400))
    run = uuid.uuid4().hex[:8]
    # Ids and a checkpoint (not on the map) no other test's rows or searches have: the tables are shared.
    faces = [(kind, {**record, "record_id": f"10.27.27.27-{run}{n}", "checkpoint_id": "999927#9#0#0"})
             for n, (kind, record) in enumerate(valid_records(20, seed=27, clock=clock, face_share=1.0))
             if kind is Kind.FACE][:3]
    assert faces and all("feature" in record for _, record in faces)
    load(console.backing.gateway.port, faces)
    for _, record in faces:
        path = f"/api/v1/captures/face/{record['record_id']}"
        operator = console.client("operator").get(path)
        assert operator.status_code == 200 and operator.json()["feature"] == record["feature"]
        viewer = console.client("viewer").get(path)
        assert viewer.status_code == 200 and "feature" not in viewer.json()
        assert viewer.json()["record_id"] == record["record_id"]
        assert record["feature"] not in viewer.text


def test_viewer_gets_no_control_topic_and_no_feature_in_raw_messages(console: ConsoleProcess) -> None:
    viewer, operator = console.client("viewer"), console.client("operator")
    for topic in ("video.commands", "control.watchlist", "control.stats"):
        refused = viewer.get(f"/api/v1/bus/topics/{topic}/messages")
        assert refused.status_code == 403 and "control topic" in refused.json()["detail"], topic
        assert operator.get(f"/api/v1/bus/topics/{topic}/messages").status_code != 403
    topic = f"hardening-faces-{uuid.uuid4().hex[:8]}"
    feature = "AAAAAAAAAAAAAAAAAAAAAAAA" + uuid.uuid4().hex
    producer = Producer({"bootstrap.servers": console.backing.broker.bootstrap})
    producer.produce(topic, json.dumps({"record_id": "r1", "feature": feature}).encode())
    assert producer.flush(15) == 0
    deadline = time.monotonic() + 30
    while not (seen := operator.get(f"/api/v1/bus/topics/{topic}/messages")).is_success or not seen.json():
        assert time.monotonic() < deadline, seen.text
        time.sleep(0.5)
    assert feature in seen.text
    shown = viewer.get(f"/api/v1/bus/topics/{topic}/messages")
    assert shown.status_code == 200 and feature not in shown.text
    assert json.loads(shown.json()[0]["value"]["data"]) == {"record_id": "r1"}


def test_viewer_events_carry_no_face_feature(make_console: Callable[..., ConsoleProcess]) -> None:
    topic = f"hardening.watchlist.{uuid.uuid4().hex[:8]}"  # this console's own control.watchlist
    console = make_console(topics={"control_watchlist": topic})
    watch_id = f"face-{uuid.uuid4().hex[:8]}"
    feature = struct.pack("<128f", *([0.0] * 127 + [1.0]))
    value = WatchCommand(watch_id, "face", feature=feature, threshold=0.9, requested_by="operator").to_json()

    async def follow(role: str, seen: dict[str, dict[str, Any]]) -> None:
        headers = {"Authorization": f"Bearer {console.token(role)}"}
        async with httpx.AsyncClient(base_url=console.url, headers=headers, timeout=60) as client, \
                client.stream("GET", f"/api/v1/events?topics={topic}") as response:
            assert response.status_code == 200
            events: list[tuple[str, dict[str, Any]]] = []
            await read_events(response, watch_id, events)
            seen[role] = events[-1][1]

    async def scenario() -> dict[str, dict[str, Any]]:
        await hub_follows(console, topic)
        seen: dict[str, dict[str, Any]] = {}
        readers = [asyncio.create_task(follow(role, seen)) for role in ("viewer", "operator")]
        await asyncio.sleep(1)
        await asyncio.to_thread(produce, console, topic, value, watch_id.encode())
        await asyncio.wait_for(asyncio.gather(*readers), 60)
        return seen

    seen = run_async(scenario)
    assert seen["operator"]["feature"] == value["feature"]
    assert "feature" not in seen["viewer"] and seen["viewer"]["watch_id"] == watch_id
    assert seen["viewer"]["threshold"] == 0.9


# -- 10. HTTPS ---------------------------------------------------------------------------------------------------
@pytest.fixture
def tls_console(console: ConsoleProcess, tmp_path: Path) -> Iterator[tuple[str, ssl.SSLContext, int]]:
    """A console on the session's backends with ``tls_cert`` / ``tls_key`` from a throw-away CA."""
    authority = Authority.create("test CA")
    server = authority.issue(name((NameOID.COMMON_NAME, "console")), server=True)
    cert = tmp_path / "console.pem"
    cert.write_text(server.chain_pem())
    key = tmp_path / "console.key"
    write_private(key, server.key_pem())
    ca = authority.write_certificate(tmp_path / "ca.pem")
    backing: Backing = console.backing
    port = free_port()
    config = write_config(tmp_path / "tls.toml", backing, port, tmp_path / "data", tls_cert=str(cert),
                          tls_key=str(key), url=f"https://127.0.0.1:{port}")
    log_path = tmp_path / "console.log"
    with open(log_path, "wb") as log:
        proc = spawn([sys.executable, "-m", "web", "--config", str(config)], log)
    context = ssl.create_default_context(cafile=str(ca))
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, log_path.read_text(errors="replace")
            assert time.monotonic() < deadline, f"no HTTPS answer:\n{log_path.read_text(errors='replace')[-3000:]}"
            try:
                if httpx.get(f"https://127.0.0.1:{port}/api/v1/health", verify=context, timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        yield f"https://127.0.0.1:{port}", context, port
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def test_tls_serves_https_with_secure_cookies_and_hsts(tls_console: tuple[str, ssl.SSLContext, int],
                                                       console: ConsoleProcess) -> None:
    url, context, port = tls_console
    with httpx.Client(base_url=url, verify=context, timeout=30) as client:
        login = client.post("/api/v1/auth/session", data={"username": "viewer", "password": password_of("viewer")})
        assert login.status_code == 200
        cookie = login.headers["set-cookie"].lower()
        assert "secure" in cookie and "httponly" in cookie
        assert login.headers["strict-transport-security"].startswith("max-age=")
        assert client.get("/api/v1/auth/me").json()["username"] == "viewer"
        page = client.get("/")
        assert page.status_code == 200 and "strict-transport-security" in page.headers
    with pytest.raises(httpx.HTTPError):  # plain HTTP is not served on that port
        httpx.get(f"http://127.0.0.1:{port}/api/v1/health", timeout=5).raise_for_status()
    # Without the keys: HTTP as before, no HSTS, no Secure cookie.
    plain = httpx.post(f"{console.url}/api/v1/auth/session", data={"username": "viewer",
                                                                    "password": password_of("viewer")})
    assert "strict-transport-security" not in plain.headers and "secure" not in plain.headers["set-cookie"].lower()
