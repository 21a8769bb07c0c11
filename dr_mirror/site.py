"""Which site runs the business: the primary or the DR site, since when and why, in ``DATA/dr/active-site.json``.

The one record a switchover changes and every tool reads its site from (``python -m dr_mirror status``). `make up`
writes it when it finds none (the primary, since that start); a later start keeps what is there. It is written
whole to a temporary file and renamed over the old one, so a reader never sees half of it.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from dataclasses import dataclass
from pathlib import Path

SITES = ("primary", "dr")
FILE = Path("dr") / "active-site.json"


class SiteRecordError(ValueError):
    """The record is unreadable or says something no site is."""


@dataclass(frozen=True)
class ActiveSite:
    active: str
    since: dt.datetime
    reason: str

    def line(self) -> str:
        return f"active: {self.active} (since {self.since.isoformat(timespec='seconds')}: {self.reason})"


def path(data_dir: Path) -> Path:
    return data_dir / FILE


def read(data_dir: Path) -> ActiveSite | None:
    """The record, or None when there is none yet; SiteRecordError when it is not one."""
    try:
        raw = json.loads(path(data_dir).read_text())
        site = ActiveSite(str(raw["active"]), dt.datetime.fromisoformat(raw["since"]), str(raw.get("reason", "")))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SiteRecordError(f"{path(data_dir)} is not an active-site record: {exc}") from None
    if site.active not in SITES or site.since.tzinfo is None:
        raise SiteRecordError(f"{path(data_dir)} names site {site.active!r} since {raw['since']!r}: expected one of "
                              f"{', '.join(SITES)} since a time with its offset")
    return site


def write(data_dir: Path, site: ActiveSite) -> None:
    target = path(data_dir)
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps({"active": site.active, "since": site.since.isoformat(), "reason": site.reason}))
    os.replace(temporary, target)


def ensure(data_dir: Path, reason: str) -> ActiveSite:
    """The record, written first (the primary, since now) when there is none."""
    site = read(data_dir)
    if site is None:
        site = ActiveSite("primary", dt.datetime.now(dt.UTC), reason)
        write(data_dir, site)
    return site
