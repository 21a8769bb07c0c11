"""Kafka's `sasl.jaas.config` values, parsed exactly as Kafka's `JaasConfig` does.

Kafka tokenizes the value with Java's `StreamTokenizer` (words of letters, digits, `.`, `-`, `_` and `$`;
single- or double-quoted strings with backslash escapes; `//`, `/* */` and bare `/` comments; a value that
starts like a number is not a string, so `iterations=8192` must be quoted). We follow the same grammar, so a
value Kafka accepts is accepted here and one it refuses is refused with Kafka's message. Messages name keys,
never values: the options hold passwords.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"

_CONTROL_FLAGS = ("required", "requisite", "sufficient", "optional")
_ESCAPES = {"a": "\x07", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\x0b"}
_EOF = "eof"
_WORD = "word"
_NUMBER = "number"
_QUOTED = "quoted"


class JaasConfigError(ValueError):
    """A JAAS config Kafka would refuse; the caller prefixes the config key's name."""


@dataclass(frozen=True, slots=True)
class JaasEntry:
    """One login module entry: `<login module> <control flag> key=value ... ;`."""

    login_module: str
    control_flag: str
    options: Mapping[str, str] = field(repr=False)  # passwords: never printed


def _is_alpha(ch: str) -> bool:
    """StreamTokenizer's word characters, with the `-`, `_` and `$` Kafka adds."""
    return ch != "" and ((ch.isascii() and (ch.isalpha() or ch in "-_$")) or ord(ch) >= 160)


def _is_digit(ch: str) -> bool:
    return ch != "" and ch in "0123456789"


def _is_numeric(ch: str) -> bool:
    """StreamTokenizer's `parseNumbers` characters: a token starting with one is a number, never a string."""
    return ch != "" and ch in "0123456789.-"


@dataclass(slots=True)
class _Token:
    kind: str  # _EOF, _WORD, _NUMBER, _QUOTED, or the ordinary character itself
    text: str | None  # StreamTokenizer's sval: set for words and quoted strings only


class _Tokenizer:
    """java.io.StreamTokenizer as Kafka configures it (slash-slash and slash-star comments on)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def _peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def _read(self) -> str:
        ch = self._peek()
        self.pos += 1 if ch else 0
        return ch

    def _skip_line(self) -> None:
        while self._peek() not in ("", "\n", "\r"):
            self.pos += 1

    def next(self) -> _Token:
        while True:
            ch = self._read()
            if ch == "":
                return _Token(_EOF, None)
            if ord(ch) <= 32:
                continue
            if _is_numeric(ch):
                return self._number(ch)
            if _is_alpha(ch):
                return self._word()
            if ch in "\"'":
                return _Token(_QUOTED, self._quoted(ch))
            if ch == "/":
                self._comment()
                continue
            return _Token(ch, None)

    def _number(self, first: str) -> _Token:
        if first == "-" and not (_is_digit(self._peek()) or self._peek() == "."):
            return _Token("-", None)
        seen_dot = first == "."
        while _is_digit(self._peek()) or (self._peek() == "." and not seen_dot):
            seen_dot = seen_dot or self._peek() == "."
            self.pos += 1
        return _Token(_NUMBER, None)

    def _word(self) -> _Token:
        start = self.pos - 1
        while _is_alpha(self._peek()) or _is_numeric(self._peek()):
            self.pos += 1
        return _Token(_WORD, self.text[start:self.pos])

    def _quoted(self, quote: str) -> str:
        """Up to the closing quote, a line break or the end, with Java's escapes (octal up to \\377)."""
        out: list[str] = []
        while self._peek() not in ("", quote, "\n", "\r"):
            ch = self._read()
            if ch != "\\":
                out.append(ch)
                continue
            escaped = self._read()
            if "0" <= escaped <= "7":
                digits = escaped
                limit = 3 if escaped <= "3" else 2
                while len(digits) < limit and self._peek() != "" and "0" <= self._peek() <= "7":
                    digits += self._read()
                out.append(chr(int(digits, 8)))
            else:
                out.append(_ESCAPES.get(escaped, escaped))
        if self._peek() == quote:
            self.pos += 1
        return "".join(out)

    def _comment(self) -> None:
        """After a `/`: `/* ... */` is skipped; `//` and a bare `/` (a comment character) end the line."""
        if self._read() == "*":
            end = self.text.find("*/", self.pos)
            self.pos = len(self.text) if end < 0 else end + 2
        else:
            self._skip_line()


def parse_jaas_config(text: str) -> list[JaasEntry]:
    """Every login module entry of `text` (a JAAS config may hold several; `sasl.jaas.config` holds one)."""
    tokens = _Tokenizer(text)
    entries: list[JaasEntry] = []
    token = tokens.next()
    while token.kind != _EOF:
        entries.append(_parse_entry(tokens, token))
        token = tokens.next()
    if not entries:
        raise JaasConfigError("Login module not specified in JAAS config")
    return entries


def parse_jaas_entry(text: str) -> JaasEntry:
    """The single login module of a `sasl.jaas.config` value (Kafka's `JaasContext.load`)."""
    entries = parse_jaas_config(text)
    if len(entries) != 1:
        raise JaasConfigError(f"JAAS config property contains {len(entries)} login modules, should be 1 module")
    return entries[0]


def _parse_entry(tokens: _Tokenizer, first: _Token) -> JaasEntry:
    if first.text is None:
        raise JaasConfigError("Login module not specified in JAAS config")
    flag = tokens.next()
    if flag.kind == _EOF:
        raise JaasConfigError("Login module control flag not specified in JAAS config")
    if flag.text is None:
        raise JaasConfigError("Login module control flag is not available in the JAAS config")
    if flag.text.lower() not in _CONTROL_FLAGS:
        raise JaasConfigError(f"Invalid login module control flag '{flag.text}' in JAAS config")
    options: dict[str, str] = {}
    token = tokens.next()
    while token.kind not in (_EOF, ";"):
        key = token.text
        if key is None:
            raise JaasConfigError("Option name not specified in JAAS config")
        if tokens.next().kind != "=" or (value := tokens.next()).text is None:
            raise JaasConfigError(f"Value not specified for key '{key}' in JAAS config")
        options[key] = value.text
        token = tokens.next()
    if token.kind != ";":
        raise JaasConfigError("JAAS config entry not terminated by semi-colon")
    return JaasEntry(first.text, flag.text.lower(), options)
