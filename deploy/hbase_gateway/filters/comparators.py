"""The comparators of HBase's compare filters (``binary``, ``binaryprefix``, ``substring``,
``regexstring``) and the comparison operators that apply them.

Why a module of its own: every filter that tests bytes against a client's value (the compare
filters, the value filters) goes through ``Comparison``, and the filter language parses its
operators (``COMPARE_OPS``) and comparators (``Comparator.parse``) from here; the regular
expression engine choice (RE2, linear-time) lives in one place.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import re2

from .base import FilterError, compare_bytes

# CompareFilter.compare: ``r = comparator.compareTo(cell bytes)`` (comparator value first); True
# means "filter the cell out". LESS keeps cells smaller than the comparator's value, and so on.
_FILTERS_OUT: dict[bytes, Callable[[int], bool]] = {
    b"<": lambda r: r <= 0,
    b"<=": lambda r: r < 0,
    b"=": lambda r: r != 0,
    b"!=": lambda r: r == 0,
    b">=": lambda r: r > 0,
    b">": lambda r: r >= 0,
}
COMPARE_OPS = frozenset(_FILTERS_OUT)


@dataclass(frozen=True)
class Comparator:
    """``binary:v``, ``binaryprefix:v``, ``substring:v`` or ``regexstring:v`` (ParseFilter's
    ``createComparator``; the type names are case-sensitive there too)."""

    kind: str
    value: bytes
    _regex: Any = field(default=None, compare=False, repr=False)  # a compiled re2 pattern

    @classmethod
    def parse(cls, text: bytes) -> Comparator:
        kind, sep, value = text.partition(b":")
        name = kind.decode("latin-1")
        if not sep:
            raise FilterError("Incorrect comparator")
        if name == "regexstring":
            return cls(name, value, _compile_regex(value))
        if name == "substring":
            return cls(name, value.lower())  # SubstringComparator lower-cases both sides
        if name in {"binary", "binaryprefix"}:
            return cls(name, value)
        raise FilterError(f"Incorrect comparatorType {name!r} (binary, binaryprefix, regexstring, substring)")

    @property
    def equality_only(self) -> bool:
        return self.kind in {"substring", "regexstring"}

    def compare_to(self, data: bytes) -> int:
        if self.kind == "binary":
            return compare_bytes(self.value, data)
        if self.kind == "binaryprefix":
            return compare_bytes(self.value, data[: len(self.value)])
        if self.kind == "substring":
            return 0 if self.value in data.lower() else 1
        assert self._regex is not None
        return 0 if self._regex.search(data) else 1


def _regex_options() -> Any:
    options = re2.Options()
    options.dot_nl = True  # RegexStringComparator compiles with Java's DOTALL
    options.encoding = re2.Options.Encoding.LATIN1  # its default charset: one character per byte
    options.log_errors = False  # a client's bad pattern is answered, not logged by RE2 on stderr
    return options


_REGEX_OPTIONS = _regex_options()


def _compile_regex(pattern: bytes) -> Any:
    """RegexStringComparator's pattern, compiled by RE2, whose matching time is linear in the
    input: a client's pattern such as ``(a+)+$`` cannot keep a gateway thread busy for hours
    with the GIL held, as Python's backtracking ``re`` would. RE2 has no backreferences nor
    lookaround (Java's regex has): such a pattern is refused with a clear error."""
    try:
        return re2.compile(pattern, _REGEX_OPTIONS)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise FilterError(
            f"bad or unsupported regular expression {pattern!r}: {reason} (the gateway matches with RE2, "
            "linear-time: no backreferences or lookaround)"
        ) from None


@dataclass(frozen=True)
class Comparison:
    op: bytes
    comparator: Comparator

    def filters_out(self, data: bytes) -> bool:
        return _FILTERS_OUT[self.op](self.comparator.compare_to(data))
