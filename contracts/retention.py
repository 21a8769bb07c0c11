"""How long personal data is kept: ``[retention]`` of the solution config, as HBase column-family time to live.

Captures are kept 90 days, watch hits one year, the audit trail three years unless the config says otherwise
(``captures_days``, ``hits_days``, ``audit_days``; fractions of a day allowed, so a test can watch data expire).
Objects expire by their bucket's S3 lifecycle rule, in whole days: footage (``videos_days``, 30) and synopses
(``synopsis_days``, 30), capture images with their records (``captures_days``); the embedded store gets the rules at
start (`deploy/object_store.py`), and ``python -m deploy.retention --show`` prints them for another store.
Every family of a table gets its table's TTL (HBase's ``TTL`` semantics: a cell older than it is invisible at once
and leaves the files at the next compaction). The TTL is set when a table is created; a table that exists keeps
what it has (Thrift1 cannot alter a family), and ``python -m deploy.retention --show`` prints the HBase shell's
``alter`` statements that bring a real HBase in line.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

from .tables import Families

if TYPE_CHECKING:
    from .config import Config

DAY_S = 86_400


@dataclass(frozen=True)
class Retention:
    captures_days: float = 90.0
    hits_days: float = 365.0
    audit_days: float = 3 * 365.0
    videos_days: float = 30.0
    """Footage in the ``videos`` bucket (a bucket lifecycle rule, whole days)."""
    synopsis_days: float = 30.0
    """Condensed videos in the ``synopsis`` bucket."""

    @classmethod
    def from_config(cls, config: Config) -> Retention:
        """``[retention]``; a value that is not a positive number stops the caller with the key's name."""
        section = config.section("retention")
        values: dict[str, float] = {}
        for f in fields(cls):
            value = section.get(f.name, getattr(cls(), f.name))
            if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"retention.{f.name} in {config.path} should be a number of days > 0, not {value!r}")
            values[f.name] = float(value)
        unknown = set(section) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"[retention] in {config.path} has unknown keys: {', '.join(sorted(unknown))}")
        return cls(**values)

    @property
    def captures_ttl_s(self) -> int:
        return ttl_seconds(self.captures_days)

    @property
    def hits_ttl_s(self) -> int:
        return ttl_seconds(self.hits_days)

    @property
    def audit_ttl_s(self) -> int:
        return ttl_seconds(self.audit_days)

    def bucket_days(self) -> dict[str, int]:
        """Each bucket's S3 lifecycle expiration in whole days (S3's unit; at least one): footage, synopses, and
        capture images as long as their records (``captures_days``)."""
        return {"videos": math.ceil(self.videos_days), "synopsis": math.ceil(self.synopsis_days),
                "captures": math.ceil(self.captures_days)}


def ttl_seconds(days: float) -> int:
    return max(1, round(days * DAY_S))


def with_ttl(layouts: Mapping[str, Families], ttl_s: int) -> dict[str, Families]:
    """``layouts`` with every family's ``time_to_live`` set to ``ttl_s`` (what ``create_table`` is given)."""
    return {table: {family: {**options, "time_to_live": ttl_s} for family, options in families.items()}
            for table, families in layouts.items()}
