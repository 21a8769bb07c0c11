"""Which site runs the business: the primary or the DR site, since when and why, in ``DATA/dr/active-site.json``.

The one record a switchover changes and every part reads its site from (``python -m dr_mirror status``, and through
:class:`Gate` every service that stands by at a site that is not active). `make up` writes it when it finds none
(the primary, since that start); a later start keeps what is there. It is written whole to a temporary file and
renamed over the old one, so a reader never sees half of it.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .config import Config

log = logging.getLogger(__name__)

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
    return read_record(path(data_dir))


def read_record(record: Path) -> ActiveSite | None:
    """The record at ``record`` (a path of its own, e.g. ``[site] record``), as :func:`read` reads it."""
    try:
        raw = json.loads(record.read_text())
        site = ActiveSite(str(raw["active"]), dt.datetime.fromisoformat(raw["since"]), str(raw.get("reason", "")))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SiteRecordError(f"{record} is not an active-site record: {exc}") from None
    if site.active not in SITES or site.since.tzinfo is None:
        raise SiteRecordError(f"{record} names site {site.active!r} since {raw['since']!r}: expected one of "
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


class Gate:
    """Whether the site this process runs at (``[site] name``) is the active one, by the record at ``[site] record``.

    A service at a standing-by site runs and keeps its state current but does not act (publishes nothing a mirror
    copies, joins no consumer group the mirror keeps in step); it acts from the moment the record names its site.
    Reading a small file each time would cost a system call per batch, so the answer is kept ``interval_s``. No
    record yet means the primary runs the business (as :func:`ensure` would write). An unreadable record changes
    nothing: the last answer stands, and the first failure is logged.
    """

    def __init__(self, site: str, record: Path, interval_s: float = 0.5) -> None:
        if site not in SITES:
            raise ValueError(f"site {site!r} is not one of {', '.join(SITES)}")
        self.site = site
        self.record = record
        self.interval_s = interval_s
        self._active = False
        self._due = 0.0
        self._failing = False

    @classmethod
    def from_config(cls, config: Config) -> Gate | None:
        """The gate ``[site]`` describes (``name`` and ``record``), None when the config has no ``[site]``: a
        solution without a DR site is always active."""
        section = config.section("site")
        if not section:
            return None
        name, record = section.get("name"), section.get("record")
        if name not in SITES:
            raise ValueError(f"site.name in {config.path} should be one of {', '.join(SITES)}, not {name!r}")
        if not isinstance(record, str) or not record:
            raise ValueError(f"site.record in {config.path} should be the path of the active-site record, "
                             f"not {record!r}")
        return cls(name, Path(record))

    def active(self) -> bool:
        now = time.monotonic()
        if now >= self._due:
            self._due = now + self.interval_s
            try:
                site = read_record(self.record)
            except SiteRecordError as exc:
                if not self._failing:
                    log.warning("%s: keeping %s", exc, "active" if self._active else "standing by")
                self._failing = True
                return self._active
            self._failing = False
            self._active = (site.active if site else "primary") == self.site
        return self._active
