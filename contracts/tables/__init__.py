"""HBase table layouts (docs/architecture.md "HBase tables"): tables, families and row keys, one module per business.

Every layout follows the same rules, so they share these helpers: row keys are deterministic (a
replayed batch rewrites the same cells), start with a short hash of their leading field (writes spread
over regions instead of hot-spotting the newest one), and carry reversed timestamps where scans want
the newest first.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

MAX_MS = 9_999_999_999_999  # 13 digits: reversed millisecond timestamps sort newest first until year 2286

Families = Mapping[str, Mapping[str, Any]]
"""happybase's ``create_table`` families argument: family name -> options (e.g. ``max_versions``)."""


def salt(text: str) -> str:
    """Four hex digits of MD5: 65,536 buckets, stable across processes (unlike ``hash()``)."""
    return hashlib.md5(text.encode()).hexdigest()[:4]


def reversed_ms(ms: int) -> str:
    return f"{MAX_MS - ms:013d}"


def ensure_tables(connection: Any, layouts: Mapping[str, Families]) -> None:
    """Create the tables of ``layouts`` that are missing (happybase connection); existing ones are kept."""
    existing = {t.decode() if isinstance(t, bytes) else t for t in connection.tables()}
    for name, families in layouts.items():
        if name not in existing:
            try:
                connection.create_table(name, dict(families))
            except Exception:
                # Another writer may have created it in between (AlreadyExists): fine if it is there now.
                if name.encode() not in connection.tables() and name not in connection.tables():
                    raise
