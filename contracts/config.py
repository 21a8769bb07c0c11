"""Load the solution config (``contracts/solution.toml``) once; flags override it, never the reverse.

Each ``main()`` calls :func:`add_config_flag` and :func:`load` and passes the sections it needs
down, so nothing deep inside reads files or globals. A missing file means the built-in defaults
(the same values as the shipped TOML), so tests and ad-hoc runs need no config at all.
"""

from __future__ import annotations

import argparse
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

DEFAULT_PATH = Path(__file__).with_name("solution.toml")


class Config:
    """The parsed TOML: ``config.get("hbase", "port", 9090)``; sections are plain dicts."""

    def __init__(self, data: Mapping[str, Any], path: Path | None = None) -> None:
        self.data = dict(data)
        self.path = path

    def section(self, name: str) -> dict[str, Any]:
        value = self.data.get(name, {})
        if not isinstance(value, dict):
            raise ValueError(f"[{name}] in {self.path} is not a table")
        return value

    def get(self, section: str, key: str, default: Any) -> Any:
        value = self.section(section).get(key, default)
        if default is not None and value is not None and not isinstance(value, type(default)):
            if isinstance(default, float) and isinstance(value, int):
                return float(value)
            raise ValueError(f"{section}.{key} in {self.path} should be {type(default).__name__}, not {value!r}")
        return value


def load(path: Path | str | None = None) -> Config:
    """Read ``path`` (default: the shipped solution.toml); a default path that is absent is empty."""
    file = Path(path) if path is not None else DEFAULT_PATH
    if not file.exists():
        if path is not None:
            raise FileNotFoundError(f"solution config not found: {file}")
        return Config({}, None)
    with file.open("rb") as handle:
        return Config(tomllib.load(handle), file)


def add_config_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, default=None,
                        help=f"solution config (TOML); default {DEFAULT_PATH.name} in contracts/")


def preparse_config(argv: list[str] | None) -> Config:
    """Load the config named by ``--config`` before the full parse, so it can supply the defaults."""
    pre = argparse.ArgumentParser(add_help=False)
    add_config_flag(pre)
    known, _ = pre.parse_known_args(argv)
    return load(known.config)
