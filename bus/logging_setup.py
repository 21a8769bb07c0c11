"""The broker's logs: the solution's one structured format (`contracts.logs`), as service `bus`."""

from __future__ import annotations

import logging

from contracts.logs import setup


def setup_logging(fmt: str = "json", level: int = logging.INFO) -> None:
    setup("bus", fmt, level)
