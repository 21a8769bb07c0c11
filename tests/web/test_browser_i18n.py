"""The message catalogs: Chinese and English say the same things, and every message a page asks for exists.

A key missing from one catalog would show the raw key to the operator in that language; a placeholder
missing from one translation would leave ``{name}`` on screen. Both are caught here, without a browser.
"""

from __future__ import annotations

import re
import string
from pathlib import Path

import pytest
from confluent_kafka import ConsumerGroupState

from contracts.deployment_map import DeploymentMap
from contracts.records import FIELDS, Kind
from web import i18n
from web.auth import Role
from web.models.health import Health
from web.routers.pages import PAGES

WEB = Path(__file__).resolve().parents[2] / "web"
# t('key') / t("key") in templates and scripts (dynamic keys are checked below from their sources).
LITERAL_KEY = re.compile(r"""\bt\(\s*['"]([a-z_]+(?:\.[A-Za-z0-9_]+)+)['"]""")
AUDITED_ACTION = re.compile(r'(?:audited|audit_read|audit\.record)(?:\(|, )[^"]*"([a-z_.]+)"')
"""The action of every audited command and read (``audited(...)``, ``audit_read(...)``, ``audit.record(...)``)."""
OVERVIEW_FIGURES = ("records_in", "rows_written", "latency_p50", "latency_p99", "rejected_invalid",
                    "rejected_unrecognized", "open_alerts")


def placeholders(text: str) -> set[str]:
    return {name for _lit, name, _spec, _conv in string.Formatter().parse(text) if name}


def used_keys() -> set[str]:
    keys: set[str] = set()
    for path in [*WEB.glob("templates/*.html"), *WEB.glob("static/js/*.js")]:
        keys |= set(LITERAL_KEY.findall(path.read_text(encoding="utf-8")))
    return keys


def dynamic_keys() -> set[str]:
    """Keys built at run time from a value: page titles, roles, languages, kinds, directions, components."""
    keys = {f"page.{p.name}.title" for p in PAGES} | {"page.login.title", "page.forbidden.title"}
    keys |= {f"role.{r.value}" for r in Role} | {f"lang.{code}" for code in i18n.LANGUAGES}
    keys |= {f"kind.{k.value}" for k in Kind} | {f"direction.{d}" for d in "NESW"}
    keys |= {f"component.{name}" for name in Health.model_fields}
    keys |= {f"field.{f.name}" for fields in FIELDS.values() for f in fields}  # a capture's detail
    keys |= {f"group_state.{s.name.lower()}" for s in ConsumerGroupState}  # as web.services.groups names them
    for router in WEB.glob("routers/*.py"):  # the audit page names each audited action
        keys |= {f"action.{a}" for a in AUDITED_ACTION.findall(router.read_text(encoding="utf-8"))}
    keys |= {f"overview.{f}" for f in OVERVIEW_FIGURES} | {f"overview.{f}.unit" for f in OVERVIEW_FIGURES}
    return keys


def test_both_catalogs_have_the_same_keys() -> None:
    zh, en = i18n.catalog("zh"), i18n.catalog("en")
    assert sorted(set(zh) - set(en)) == []
    assert sorted(set(en) - set(zh)) == []


def test_translations_keep_their_placeholders() -> None:
    zh, en = i18n.catalog("zh"), i18n.catalog("en")
    differing = {key: (zh[key], en[key]) for key in zh if placeholders(zh[key]) != placeholders(en[key])}
    assert differing == {}


def test_every_message_a_page_asks_for_exists() -> None:
    wanted = used_keys() | dynamic_keys()
    assert len(used_keys()) > 100  # the pattern still finds the calls
    assert sorted(wanted - set(i18n.catalog("zh"))) == []


def test_no_message_is_left_empty_or_untranslated() -> None:
    zh = i18n.catalog("zh")
    assert [key for key, text in zh.items() if not text.strip()] == []
    # Chinese is the default: a Chinese message with no CJK character is English left behind,
    # except proper names and units that read the same in both.
    same = {"html.lang", "lang.zh", "lang.en", "component.hbase"}
    latin_only = [key for key, text in zh.items() if key not in same and not re.search(r"[\u4e00-\u9fff]", text)]
    assert latin_only == []


def test_language_comes_from_the_cookie_and_defaults_to_chinese() -> None:
    assert i18n.language(None) == "zh"
    assert i18n.language("en") == "en"
    assert i18n.language("fr") == "zh"
    assert i18n.translate("en", "pager.page", n=3) == "Page 3"
    assert i18n.translate("zh", "pager.page", n=3) == "第 3 页"


def test_dynamic_direction_and_kind_keys_match_the_contracts() -> None:
    """The map's directions come from the simulator's city; a new direction would need a message."""
    from ingest.city import DIRECTIONS, build_city

    assert set(DIRECTIONS) == set("NESW")
    city = build_city(1, 8).deployment_map()
    assert isinstance(city, DeploymentMap)
    assert {d.kind for d in city.devices} <= {k.value for k in Kind}


def test_feature_catalogs_merge_and_a_key_defined_twice_is_refused(tmp_path, monkeypatch) -> None:
    (tmp_path / "en.json").write_text('{"a": "A"}', encoding="utf-8")
    (tmp_path / "video.en.json").write_text('{"b": "B"}', encoding="utf-8")
    monkeypatch.setattr(i18n, "_HERE", tmp_path)
    i18n.catalog.cache_clear()
    try:
        assert i18n.catalog("en") == {"a": "A", "b": "B"}
        (tmp_path / "watch.en.json").write_text('{"a": "again"}', encoding="utf-8")
        i18n.catalog.cache_clear()
        with pytest.raises(ValueError, match="'a' is defined twice"):
            i18n.catalog("en")
    finally:
        i18n.catalog.cache_clear()
