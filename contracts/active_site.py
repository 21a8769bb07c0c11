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
from typing import TYPE_CHECKING, Any

from .topics import site_local

if TYPE_CHECKING:
    from .config import Config

log = logging.getLogger(__name__)

SITES = ("primary", "dr")
FILE = Path("dr") / "active-site.json"


class SiteRecordError(ValueError):
    """The record is unreadable or says something no site is."""


@dataclass(frozen=True)
class ActiveSite:
    """``active`` runs the business since ``since``. While ``switching_to`` names the other site, a switchover is
    draining: neither site's services act (the devices are fenced, the mirror copies what is left) until the record
    names the new site. ``last`` holds the figures of the last switchover (`dr_mirror.switchover`), for the status
    and the DR page."""

    active: str
    since: dt.datetime
    reason: str
    switching_to: str | None = None
    last: dict[str, Any] | None = None

    def line(self) -> str:
        said = f"active: {self.active} (since {self.since.isoformat(timespec='seconds')}: {self.reason})"
        return said if self.switching_to is None else f"{said}, switching to {self.switching_to}"


def path(data_dir: Path) -> Path:
    return data_dir / FILE


def read(data_dir: Path) -> ActiveSite | None:
    """The record, or None when there is none yet; SiteRecordError when it is not one."""
    return read_record(path(data_dir))


def read_record(record: Path) -> ActiveSite | None:
    """The record at ``record`` (a path of its own, e.g. ``[site] record``), as :func:`read` reads it."""
    try:
        raw = json.loads(record.read_text())
        switching, last = raw.get("switching_to"), raw.get("last")
        site = ActiveSite(str(raw["active"]), dt.datetime.fromisoformat(raw["since"]), str(raw.get("reason", "")),
                          None if switching is None else str(switching), dict(last) if last is not None else None)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SiteRecordError(f"{record} is not an active-site record: {exc}") from None
    if site.active not in SITES or site.since.tzinfo is None:
        raise SiteRecordError(f"{record} names site {site.active!r} since {raw['since']!r}: expected one of "
                              f"{', '.join(SITES)} since a time with its offset")
    if site.switching_to not in (None, *SITES) or site.switching_to == site.active:
        raise SiteRecordError(f"{record} switches from {site.active!r} to {site.switching_to!r}: expected the "
                              "other site")
    return site


def write(data_dir: Path, site: ActiveSite) -> None:
    target = path(data_dir)
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    fields: dict[str, Any] = {"active": site.active, "since": site.since.isoformat(), "reason": site.reason}
    if site.switching_to is not None:
        fields["switching_to"] = site.switching_to
    if site.last is not None:
        fields["last"] = site.last
    temporary.write_text(json.dumps(fields))
    os.replace(temporary, target)


def ensure(data_dir: Path, reason: str) -> ActiveSite:
    """The record, written first (the primary, since now) when there is none."""
    site = read(data_dir)
    if site is None:
        site = ActiveSite("primary", dt.datetime.now(dt.UTC), reason)
        write(data_dir, site)
    return site


class Watcher:
    """The record at ``record`` as a process that keeps reading it sees it: read at most every ``interval_s`` (a
    file read per batch or per tick would be a system call each); an unreadable record changes nothing (the last
    reading stands, the first failure is logged, naming what the process keeps doing: ``keeping``)."""

    def __init__(self, record: Path, interval_s: float = 0.5) -> None:
        self.record = record
        self.interval_s = interval_s
        self._site: ActiveSite | None = None
        self._due = 0.0
        self._failing = False
        self.known = False
        """Whether a reading has succeeded yet (no file counts: it says the primary)."""

    def current(self, keeping: str) -> ActiveSite | None:
        """The record as last read (None: there is none yet, which means the primary runs the business)."""
        now = time.monotonic()
        if now >= self._due:
            self._due = now + self.interval_s
            try:
                self._site = read_record(self.record)
            except SiteRecordError as exc:
                if not self._failing:
                    log.warning("%s: %s", exc, keeping)
                self._failing = True
                return self._site
            self._failing = False
            self.known = True
        return self._site


class SiteRecord:
    """The active-site record as the devices read it (:class:`Watcher`): which site takes their records, images and
    footage, and whether a switchover is draining. No record yet, or none readable yet, means the primary."""

    def __init__(self, record: Path, interval_s: float = 0.5) -> None:
        self.record = record
        self._watcher = Watcher(record, interval_s)
        self._site = "primary"

    @classmethod
    def from_config(cls, config: Config) -> SiteRecord | None:
        """The record at ``[site] record``, or None when the config has no ``[site]``: no DR site, always the
        primary."""
        if not config.section("site"):
            return None
        record = config.get("site", "record", "")
        if not record:
            raise ValueError(f"site.record in {config.path} should be the path of the active-site record")
        return cls(Path(record))

    def read(self) -> tuple[str, bool]:
        """The site the record names, and whether a switchover away from it is draining."""
        site = self._watcher.current(f"the devices stay at {self._site}")
        self._site = "primary" if site is None else site.active
        return self._site, site is not None and site.switching_to is not None


class Gate:
    """Whether the site this process runs at (``[site] name``) is the active one, by the record at ``[site] record``.

    A service at a standing-by site runs and keeps its state current but does not act (publishes nothing a mirror
    copies, joins no consumer group the mirror keeps in step); it acts from the moment the record names its site. No
    record yet means the primary runs the business (as :func:`ensure` would write). The record is read through a
    :class:`Watcher`: an unreadable record changes nothing.
    """

    def __init__(self, site: str, record: Path, interval_s: float = 0.5, *, while_switching: bool = False) -> None:
        """``while_switching``: the site stays active while a switchover away from it drains (the mirror copying
        from it); every service stands down as soon as a switchover begins."""
        if site not in SITES:
            raise ValueError(f"site {site!r} is not one of {', '.join(SITES)}")
        self.site = site
        self.record = record
        self.while_switching = while_switching
        self._watcher = Watcher(record, interval_s)
        self._active = False

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
        site = self.seen()
        self._active = self._watcher.known and (site.active if site else "primary") == self.site and (
            site is None or site.switching_to is None or self.while_switching)
        return self._active

    def own(self, topic: str) -> str:
        """This site's own copy of ``topic`` (``<site>.<topic>``, which no mirror copies; a topic that already is
        one stays: the DR site's loaders publish to ``dr.``-prefixed copies in either role)."""
        return topic if topic.startswith(f"{self.site}.") else site_local(self.site, topic)

    def local(self, topic: str) -> str:
        """Where a process at this site publishes ``topic`` now: ``topic`` itself while the site is active, its own
        copy (:meth:`own`) while it stands by, since there the mirror is the one writer of ``topic``."""
        return topic if self.active() else self.own(topic)

    def seen(self) -> ActiveSite | None:
        """The record as this gate reads it (None: there is none yet, the primary runs the business)."""
        return self._watcher.current(f"keeping {'active' if self._active else 'standing by'}")
