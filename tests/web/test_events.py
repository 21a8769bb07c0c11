"""The SSE hub through a real console: fan-out to 200 pages, topic filters, closed pages removed."""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from typing import Any

import httpx
from confluent_kafka import Producer

from tests.web.conftest import ConsoleProcess, password_of
from web.events import Subscription

HITS = "surveillance.hits"
STATUS = "video.status"


def sse_clients(console: ConsoleProcess) -> int:
    text = httpx.get(f"{console.url}/metrics").text
    match = re.search(r"^console_sse_clients (\S+)$", text, re.M)
    assert match, "console_sse_clients gauge missing"
    return int(float(match.group(1)))


def wait_for_clients(console: ConsoleProcess, count: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while (seen := sse_clients(console)) != count:
        assert time.monotonic() < deadline, f"{seen} SSE clients, expected {count}"
        time.sleep(0.1)


def produce(console: ConsoleProcess, topic: str, value: dict[str, Any] | bytes, key: bytes | None = None) -> None:
    producer = Producer({"bootstrap.servers": console.backing.broker.bootstrap})
    producer.produce(topic, value if isinstance(value, bytes) else json.dumps(value).encode(), key=key)
    assert producer.flush(10) == 0


async def read_events(response: httpx.Response, until: str, events: list[tuple[str, dict[str, Any]]]) -> None:
    """Append ``(event, data)`` pairs until one whose data contains ``until``."""
    event = None
    async for line in response.aiter_lines():
        if line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:") and event:
            data = json.loads(line[5:].strip())
            events.append((event, data))
            if until in line:
                return


async def hub_follows(console: ConsoleProcess, topic: str) -> None:
    """Produce probes until one page sees one: the hub has found the topic (it looks every few seconds)."""
    headers = {"Authorization": f"Bearer {console.token('viewer')}"}
    async with httpx.AsyncClient(base_url=console.url, headers=headers, timeout=60) as client, \
            client.stream("GET", f"/api/v1/events?topics={topic}") as response:
        assert response.status_code == 200
        marker = f"probe-{uuid.uuid4().hex}"
        events: list[tuple[str, dict[str, Any]]] = []
        reader = asyncio.create_task(read_events(response, marker, events))
        while not reader.done():
            await asyncio.to_thread(produce, console, topic, {"probe": marker})
            await asyncio.wait([reader], timeout=1)
        await reader


def test_200_pages_each_get_the_event_and_leave_no_trace(console: ConsoleProcess) -> None:
    token = console.token("viewer")

    async def scenario() -> list[float]:
        await hub_follows(console, HITS)
        limits = httpx.Limits(max_connections=250, max_keepalive_connections=0)
        async with httpx.AsyncClient(base_url=console.url, headers={"Authorization": f"Bearer {token}"},
                                     timeout=60, limits=limits) as client:
            marker = f"hit-{uuid.uuid4().hex}"
            received: list[float] = []

            async def page() -> None:
                async with client.stream("GET", f"/api/v1/events?topics={HITS}") as response:
                    assert response.status_code == 200
                    events: list[tuple[str, dict[str, Any]]] = []
                    await read_events(response, marker, events)
                    received.append(time.monotonic())
                    assert events[-1] == (HITS, {"plate_number": "粤B12345", "marker": marker, "topic": HITS})

            pages = [asyncio.create_task(page()) for _ in range(200)]
            await asyncio.to_thread(wait_for_clients, console, 200)
            sent = time.monotonic()
            await asyncio.to_thread(produce, console, HITS, {"plate_number": "粤B12345", "marker": marker})
            await asyncio.wait_for(asyncio.gather(*pages), 60)
            return [t - sent for t in received]

    delays = asyncio.run(scenario())
    assert len(delays) == 200
    print(f"200 pages: slowest received the event {max(delays) * 1000:.0f} ms after produce")
    wait_for_clients(console, 0, timeout=10)


def test_a_closed_page_is_removed_at_once(console: ConsoleProcess) -> None:
    with console.client("viewer").stream("GET", "/api/v1/events") as response:
        assert response.status_code == 200
        wait_for_clients(console, 1)
    wait_for_clients(console, 0, timeout=3)


def test_topic_filter_and_cookie_auth(console: ConsoleProcess) -> None:
    async def scenario() -> list[tuple[str, dict[str, Any]]]:
        await hub_follows(console, STATUS)
        await hub_follows(console, HITS)
        async with httpx.AsyncClient(base_url=console.url, timeout=60) as browser:
            login = await browser.post("/api/v1/auth/session",
                                       data={"username": "viewer", "password": password_of("viewer")})
            assert login.status_code == 200
            async with browser.stream("GET", f"/api/v1/events?topics={STATUS}") as response:
                assert response.status_code == 200
                events: list[tuple[str, dict[str, Any]]] = []
                reader = asyncio.create_task(read_events(response, "last-one", events))
                await asyncio.to_thread(wait_for_clients, console, 1)
                await asyncio.to_thread(produce, console, HITS, {"not": "wanted"})
                await asyncio.to_thread(produce, console, STATUS, b"plain text, not JSON")
                await asyncio.to_thread(produce, console, STATUS, {"task_id": "last-one"})
                await asyncio.wait_for(reader, 30)
                return events

    events = asyncio.run(scenario())
    assert events == [(STATUS, {"value": "plain text, not JSON", "topic": STATUS}),
                      (STATUS, {"task_id": "last-one", "topic": STATUS})]


def test_unknown_topic_is_422_naming_the_field(console: ConsoleProcess) -> None:
    response = console.client("viewer").get("/api/v1/events?topics=capture.vehicle")
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["query", "topics"]
    assert "capture.vehicle" in response.json()["detail"][0]["msg"]


def test_a_full_queue_drops_the_oldest_and_counts() -> None:
    subscription = Subscription(frozenset({"t"}), size=3)
    for n in range(5):
        subscription.put("t", str(n))
    assert [data for _topic, data in subscription.queue] == ["2", "3", "4"]
    assert subscription.dropped == 2
