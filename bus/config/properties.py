"""Java `.properties` parsing, so a Kafka `server.properties` file is read exactly as Kafka reads it.

Kafka loads its config with `java.util.Properties.load`, which allows `=`, `:` or whitespace as the
separator, `#`/`!` comments, backslash line continuations and escapes. Operators copy these files
between Kafka and our broker, so we follow the same grammar rather than a simpler ad-hoc one.
"""

from __future__ import annotations

from pathlib import Path

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


class PropertiesError(ValueError):
    """A properties file or override that cannot be parsed."""


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """Join backslash-continued lines; returns (first line number, text) pairs."""
    out: list[tuple[int, str]] = []
    pending: str | None = None
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.lstrip(" \t\f")
        if pending is None:
            if not line or line[0] in "#!":
                continue
            start = number
        trailing = len(line) - len(line.rstrip("\\"))
        continued = trailing % 2 == 1
        if continued:
            line = line[:-1]
        pending = line if pending is None else pending + line
        if not continued:
            out.append((start, pending))
            pending = None
    if pending is not None:
        out.append((start, pending))
    return out


def _unescape(text: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch != "\\" or i + 1 == len(text):
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "u" and i + 6 <= len(text):
            try:
                out.append(chr(int(text[i + 2 : i + 6], 16)))
            except ValueError as exc:
                raise PropertiesError(f"malformed \\u escape in {text!r}") from exc
            i += 6
            continue
        out.append(_ESCAPES.get(nxt, nxt))
        i += 2
    return "".join(out)


def _split_key_value(line: str) -> tuple[str, str]:
    i = 0
    while i < len(line):
        ch = line[i]
        if ch == "\\":
            i += 2
            continue
        if ch in "=: \t\f":
            break
        i += 1
    key = line[:i]
    rest = line[i:].lstrip(" \t\f")
    if rest[:1] in ("=", ":") and (i == len(line) or line[i] in " \t\f" or line[i] in "=:"):
        rest = rest[1:].lstrip(" \t\f")
    return _unescape(key), _unescape(rest)


def parse_properties(text: str) -> dict[str, str]:
    """Parse the text of a `.properties` file; later keys win, as in Java."""
    props: dict[str, str] = {}
    for _number, line in _logical_lines(text):
        key, value = _split_key_value(line)
        if key:
            props[key] = value
    return props


def load_properties(path: str | Path) -> dict[str, str]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise PropertiesError(f"cannot read {path}: {exc.strerror or exc}") from exc
    return parse_properties(text)


def parse_override(item: str) -> tuple[str, str]:
    """`--override key=value` as kafka-server-start accepts it."""
    key, sep, value = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise PropertiesError(f"--override expects key=value, got {item!r}")
    return key, value.strip()
