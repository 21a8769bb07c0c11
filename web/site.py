"""The site this console runs at: whether it acts now, and where the console of the site that does is.

With a DR site each site runs a console over its own bus and HBase (`deploy/dr_site.py`), both from configs with a
``[site]`` section: ``name`` (``primary`` or ``dr``), ``record`` (the active-site record a switchover changes,
`contracts/active_site.py`) and ``consoles`` (each site's console URL). The console at the site the record names
acts as any console does. The other one stands by, read-only (:mod:`web.standby`): its pages and reads answer, with
a banner naming the active site, but nothing changes there, and an operator's pages go to the active site's
console. Its reads are still audited, to its site's own copy of the audit topic (``dr.audit``, ``primary.audit``):
the mirror is the one writer of ``audit`` at a standing-by site. Without ``[site]`` the console always acts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from contracts import active_site

if TYPE_CHECKING:
    from contracts.config import Config


@dataclass(frozen=True)
class SiteSettings:
    """``[site]`` as the console reads it; ``name`` None: a solution without a DR site."""

    name: str | None = None
    record: Path = Path("data") / active_site.FILE
    consoles: dict[str, str] = field(default_factory=dict)
    """Each site's console URL (``[site] consoles``, e.g. ``{primary = "https://...", dr = "https://..."}``)."""

    @classmethod
    def from_config(cls, config: Config) -> SiteSettings:
        """ValueError naming the key for a ``[site]`` that names no site, no record or a console that is no URL."""
        gate = active_site.Gate.from_config(config)
        if gate is None:
            return cls()
        consoles = config.section("site").get("consoles", {})
        if not isinstance(consoles, dict) or not all(
                name in active_site.SITES and isinstance(url, str) and url.startswith(("http://", "https://"))
                for name, url in consoles.items()):
            raise ValueError(f"site.consoles in {config.path} should map {' and '.join(active_site.SITES)} to their "
                             f"console's http(s) URL, not {consoles!r}")
        return cls(gate.site, gate.record, {name: url.rstrip("/") for name, url in consoles.items()})


@dataclass(frozen=True)
class SiteState:
    """What a request sees of the sites: this console's, the active one, and whether this console acts."""

    site: str | None
    active: str
    switching_to: str | None
    acting: bool
    active_console: str | None
    """The URL of the console to send operators to: the active site's, when this one stands by and no switchover is
    under way (None: this console acts, or a switchover is draining, or the URL is not configured)."""

    def banner(self) -> str | None:
        """Why this console is read-only, for its banner and its refusals; None while it acts."""
        if self.acting:
            return None
        if self.switching_to is not None:
            return (f"A switchover from the {self.active} site to the {self.switching_to} site is under way: "
                    "this console is read-only until it ends.")
        where = f" Its console: {self.active_console}" if self.active_console else ""
        return (f"This is the {self.site} site's console, standing by: read-only. The {self.active} site runs the "
                f"business.{where}")


class ConsoleSite:
    """Reads the active-site record (at most every half second, `contracts.active_site.Gate`) for each question."""

    def __init__(self, settings: SiteSettings, audit_topic: str) -> None:
        self.settings = settings
        self._audit_topic = audit_topic
        self._gate = active_site.Gate(settings.name, settings.record) if settings.name else None
        self._draining = (active_site.Gate(settings.name, settings.record, while_switching=True) if settings.name
                          else None)

    def state(self) -> SiteState:
        if self._gate is None:
            return SiteState(None, "primary", None, True, None)
        acting = self._gate.active()
        record = self._gate.seen()
        active = record.active if record is not None else "primary"
        switching = record.switching_to if record is not None else None
        url = None if acting or switching is not None else self.settings.consoles.get(active)
        return SiteState(self.settings.name, active, switching, acting, url)

    def acting(self) -> bool:
        return self._gate is None or self._gate.active()

    def publishing(self) -> bool:
        """Whether this console publishes its users and sessions for the other site: while its site acts, and on
        while a switchover away from it drains (the mirror copies until the drain ends), so that a login of the
        last second before a planned switchover is at the other site when it takes over."""
        return self._draining is None or self._draining.active()

    def audit_topic(self) -> str:
        """Where an audit event goes now: ``audit`` while this console acts, its site's own copy otherwise."""
        return self._audit_topic if self._gate is None else self._gate.local(self._audit_topic)

    def audit_topics(self) -> list[str]:
        """What the audit loader reads: ``audit`` (written here while this site acts, mirrored in otherwise) and,
        with a site, the audit of its standing-by time."""
        if self._gate is None:
            return [self._audit_topic]
        return [self._audit_topic, self._gate.own(self._audit_topic)]

    def loader_group(self) -> str:
        """The audit loader's consumer group: a site's own (the mirror keeps the primary's ``audit-loader`` in step
        at the DR site, where no member may hold it)."""
        return "audit-loader" if self.settings.name in (None, "primary") else f"audit-loader-{self.settings.name}"
