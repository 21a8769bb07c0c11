"""The console's message catalogs: Chinese (the default) and English.

Every string a page shows comes from here, both in templates (``t("key")``) and in page scripts
(the catalog is embedded in each page as JSON). A language's catalog is ``<lang>.json`` merged with
one ``<feature>.<lang>.json`` per business (surveillance, video, ...), so each business keeps its
strings beside the others without editing a common file; a key defined twice is an error. The
choice is a ``lang`` cookie, so it survives reloads and new tabs without a user setting.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

LANGUAGES = ("zh", "en")
DEFAULT_LANGUAGE = "zh"
COOKIE = "lang"
_HERE = Path(__file__).parent


@cache
def catalog(lang: str) -> dict[str, str]:
    """The messages of one language (read once per process)."""
    if lang not in LANGUAGES:
        raise KeyError(f"no catalog for language {lang!r}")
    merged: dict[str, str] = {}
    for path in [_HERE / f"{lang}.json", *sorted(_HERE.glob(f"*.{lang}.json"))]:
        for key, text in json.loads(path.read_text(encoding="utf-8")).items():
            if key in merged:
                raise ValueError(f"message {key!r} is defined twice ({path.name})")
            merged[key] = text
    return merged


def language(cookie_value: str | None) -> str:
    """The language a request asked for by cookie; anything unknown falls back to Chinese."""
    return cookie_value if cookie_value in LANGUAGES else DEFAULT_LANGUAGE


def translate(lang: str, key: str, **params: object) -> str:
    """One message with ``{name}`` placeholders filled; a missing key shows itself (visible in review)."""
    text = catalog(lang).get(key, key)
    return text.format(**params) if params else text
