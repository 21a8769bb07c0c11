"""Watches end: one made without ``expires_at`` ends ``[console] watch_expiry_days`` after it was made (30 by
default), so nobody's plate or face stays watched because an operator forgot it; 0 keeps the old behaviour."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from deploy.processes.console import ConsoleProcess


def _watch(console: ConsoleProcess, **body: Any) -> dict[str, Any]:
    response = console.client("operator").post("/api/v1/watchlist", json={"kind": "plate", "plate": "浙A5E901", **body})
    assert response.status_code == 201, response.text
    return response.json()


def test_a_watch_without_an_end_ends_after_the_configured_days(console: ConsoleProcess) -> None:
    made = datetime.now(UTC)
    expires = datetime.fromisoformat(_watch(console)["expires_at"])
    assert abs(expires - (made + timedelta(days=30))) < timedelta(minutes=1)
    chosen = (made + timedelta(days=2)).replace(microsecond=0)
    assert datetime.fromisoformat(_watch(console, expires_at=chosen.isoformat())["expires_at"]) == chosen


def test_zero_days_keeps_watches_until_removed(make_console: Callable[..., ConsoleProcess]) -> None:
    assert _watch(make_console(watch_expiry_days=0))["expires_at"] is None


@pytest.mark.parametrize("days", [-1, "soon"])
def test_a_bad_expiry_stops_the_console_at_start_saying_why(make_console: Callable[..., ConsoleProcess],
                                                             days: object) -> None:
    with pytest.raises(RuntimeError, match="watch_expiry_days"):
        make_console(watch_expiry_days=days, timeout=20)
