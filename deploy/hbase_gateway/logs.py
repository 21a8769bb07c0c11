"""The gateway's logs: the solution's one structured format (`contracts.logs`), as service `hbase-gateway`,
JSON unless told otherwise. stdout is reserved for the single "listening" line that scripts and tests wait for.
"""

from __future__ import annotations

from contracts.logs import setup as setup_logs


def setup(level: str = "INFO", fmt: str = "json") -> None:
    setup_logs("hbase-gateway", fmt, level)
