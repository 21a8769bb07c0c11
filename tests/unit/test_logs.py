"""The solution's one log format (contracts/logs.py): JSON with time, level, service, logger, message and the call's
context fields, or one readable line for a terminal."""

from __future__ import annotations

import io
import json
import logging
import re

import pytest

from contracts import logs


def _emit(fmt: str, stream: io.StringIO, monkeypatch: pytest.MonkeyPatch, **extra: object) -> str:
    monkeypatch.setattr("sys.stderr", stream)
    logs.setup("monitor", fmt)
    try:
        raise ValueError("bad batch")
    except ValueError:
        logging.getLogger("monitoring.engine").warning("set aside %d records", 3, exc_info=True, extra=extra)
    return stream.getvalue()


@pytest.fixture(autouse=True)
def _restore_root() -> object:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def test_json_lines_carry_the_service_and_the_context(monkeypatch: pytest.MonkeyPatch) -> None:
    line = _emit("json", io.StringIO(), monkeypatch, topic="capture.vehicle", partition=2, device_ip="10.0.0.7")
    entry = json.loads(line.splitlines()[0])
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", entry.pop("time"))
    exc = entry.pop("exc")
    assert "ValueError: bad batch" in exc
    assert entry == {"level": "WARNING", "service": "monitor", "logger": "monitoring.engine",
                     "message": "set aside 3 records", "topic": "capture.vehicle", "partition": 2,
                     "device_ip": "10.0.0.7"}


def test_text_is_one_readable_line_with_the_context(monkeypatch: pytest.MonkeyPatch) -> None:
    first = _emit("text", io.StringIO(), monkeypatch, topic="capture.face").splitlines()[0]
    assert re.fullmatch(r"\S+Z WARNING monitor monitoring\.engine: set aside 3 records topic=capture\.face", first)


def test_auto_is_json_when_stderr_is_no_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    assert json.loads(_emit("auto", io.StringIO(), monkeypatch).splitlines()[0])["service"] == "monitor"


def test_an_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="log format 'xml'"):
        logs.setup("monitor", "xml")
