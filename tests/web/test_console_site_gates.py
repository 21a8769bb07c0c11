"""What a console at one site of two does at each moment of a switchover (`web/site.py`), from the record alone."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from contracts import active_site
from contracts.config import Config
from web.site import ConsoleSite, SiteSettings

NOW = dt.datetime(2026, 12, 1, 8, 0, tzinfo=dt.UTC)
CONSOLES = {"primary": "https://primary:8000", "dr": "https://dr:18000"}


def _consoles(data: Path) -> dict[str, ConsoleSite]:
    record = active_site.path(data)
    return {site: ConsoleSite(SiteSettings(site, record, CONSOLES), "audit") for site in active_site.SITES}


def _gates(site: ConsoleSite) -> tuple[bool, bool, str, str | None]:
    # the gates read the record at most every half second: a fresh console per step reads it now
    state = site.state()
    return state.acting, site.publishing(), site.audit_topic(), state.active_console


def test_a_planned_switchover_moves_acting_publishing_auditing_and_where_operators_go(tmp_path: Path) -> None:
    active_site.write(tmp_path, active_site.ActiveSite("primary", NOW, "make up"))
    consoles = _consoles(tmp_path)
    assert _gates(consoles["primary"]) == (True, True, "audit", None)
    assert _gates(consoles["dr"]) == (False, False, "dr.audit", CONSOLES["primary"])

    active_site.write(tmp_path, active_site.ActiveSite("primary", NOW, "make up", switching_to="dr"))
    consoles = _consoles(tmp_path)
    # draining: neither acts (read-only, nowhere to send operators yet); the primary still publishes its accounts,
    # which the mirror drains to the DR site with everything else
    assert _gates(consoles["primary"]) == (False, True, "primary.audit", None)
    assert _gates(consoles["dr"]) == (False, False, "dr.audit", None)
    assert "under way" in (consoles["dr"].state().banner() or "")

    active_site.write(tmp_path, active_site.ActiveSite("dr", NOW, "planned"))
    consoles = _consoles(tmp_path)
    assert _gates(consoles["primary"]) == (False, False, "primary.audit", CONSOLES["dr"])
    assert _gates(consoles["dr"]) == (True, True, "audit", None)
    assert consoles["dr"].loader_group() == "audit-loader-dr"
    assert consoles["dr"].audit_topics() == ["audit", "dr.audit"]


def test_without_a_site_a_console_always_acts(tmp_path: Path) -> None:
    alone = ConsoleSite(SiteSettings(), "audit")
    assert _gates(alone) == (True, True, "audit", None) and alone.audit_topics() == ["audit"]
    assert alone.loader_group() == "audit-loader" and alone.state().banner() is None


def test_a_site_section_naming_no_console_url_is_refused_naming_the_key(tmp_path: Path) -> None:
    record = str(active_site.path(tmp_path))
    good = Config({"site": {"name": "dr", "record": record, "consoles": {"primary": "https://p:1/"}}},
                  tmp_path / "c.toml")
    assert SiteSettings.from_config(good).consoles == {"primary": "https://p:1"}
    for consoles in ("https://p:1", {"elsewhere": "https://x"}, {"primary": "ftp://p"}):
        bad = Config({"site": {"name": "dr", "record": record, "consoles": consoles}}, tmp_path / "c.toml")
        with pytest.raises(ValueError, match=r"site\.consoles"):
            SiteSettings.from_config(bad)
    with pytest.raises(ValueError, match=r"site\.name"):
        SiteSettings.from_config(Config({"site": {"name": "moon", "record": record}}, tmp_path / "c.toml"))
