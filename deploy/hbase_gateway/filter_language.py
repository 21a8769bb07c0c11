"""HBase's Thrift filter language (``ParseFilter``): text in, a fresh tree of ``filters`` out.

Kept apart from the filters because the grammar and each filter's argument rules (HBase's
``createFilterFromArguments``) are their own job, tested on their own. Every filter ParseFilter
registers is here, with the argument counts, types and checks HBase applies; anything HBase
would refuse raises ``FilterError`` (the client gets IllegalArgument). Filters are stateful, so
each scan parses its own tree.

Grammar, as ParseFilter has it (precedence SKIP/WHILE > AND > OR)::

    expr    := and ("OR" and)*
    and     := unary ("AND" unary)*
    unary   := ("SKIP" | "WHILE") unary | "(" expr ")" | Name "(" [arg ("," arg)*] ")"
    arg     := 'quoted'  ('' escapes a quote) | compare-op | integer | true | false
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .filters import (
    COMPARE_OPS,
    ColumnCountGetFilter,
    ColumnPaginationFilter,
    ColumnPrefixFilter,
    ColumnRangeFilter,
    ColumnValueFilter,
    Comparator,
    Comparison,
    DependentColumnFilter,
    FamilyFilter,
    Filter,
    FilterError,
    FilterListAnd,
    FilterListOr,
    FirstKeyOnlyFilter,
    InclusiveStopFilter,
    KeyOnlyFilter,
    MultipleColumnPrefixFilter,
    PageFilter,
    PrefixFilter,
    QualifierFilter,
    RowFilter,
    SingleColumnValueFilter,
    SkipFilter,
    TimestampsFilter,
    ValueFilter,
    WhileMatchFilter,
)

_TOKEN = re.compile(
    rb"""\s*(?:
        (?P<quoted>'(?:[^']|'')*')
      | (?P<op><=|>=|!=|=|<|>)
      | (?P<punct>[(),])
      | (?P<number>-?\d+)(?![A-Za-z_])
      | (?P<word>[A-Za-z_][A-Za-z0-9_]*)
    )""",
    re.VERBOSE,
)
_KEYWORDS = {b"AND", b"OR", b"SKIP", b"WHILE"}
_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
_LONG_MAX = 2**63 - 1


@dataclass(frozen=True)
class _Token:
    kind: str  # quoted | op | punct | number | word | end
    value: bytes
    pos: int


def _tokenize(text: bytes) -> list[_Token]:
    tokens: list[_Token] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == b"":
            break
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise FilterError(f"unexpected input at offset {pos}: {text[pos : pos + 20]!r}")
        kind = m.lastgroup or ""
        raw = m.group(kind)
        value = raw[1:-1].replace(b"''", b"'") if kind == "quoted" else raw
        tokens.append(_Token(kind, value, m.start(kind)))
        pos = m.end()
    tokens.append(_Token("end", b"", len(text)))
    return tokens


# --- arguments (ParseFilter's converters) --------------------------------------------------------

Arg = tuple[str, bytes]


class _Args:
    """One filter's argument list, consumed in order with HBase's converters."""

    def __init__(self, name: str, args: list[Arg], counts: Sequence[int]) -> None:
        if len(args) not in counts:
            wanted = " or ".join(str(c) for c in counts)
            raise FilterError(f"{name}: expected {wanted} arguments but got {len(args)}")
        self.name, self.args, self.i = name, args, 0

    def _next(self, kind: str, what: str) -> bytes:
        got_kind, value = self.args[self.i]
        self.i += 1
        if got_kind != kind:
            raise FilterError(f"{self.name}: argument {self.i} should be {what}, got {value!r}")
        return value

    def quoted(self) -> bytes:
        return self._next("quoted", "a 'quoted' string")

    def integer(self, low: int = _INT_MIN, high: int = _INT_MAX) -> int:
        value = int(self._next("number", "an integer"))
        if not low <= value <= high:
            raise FilterError(f"{self.name}: {value} is out of range [{low}, {high}]")
        return value

    def boolean(self) -> bool:
        value = self._next("word", "true or false").lower()
        if value not in {b"true", b"false"}:
            raise FilterError(f"{self.name}: Incorrect Boolean Expression {value!r}")
        return value == b"true"

    def comparison(self, equality_only_check: bool = True) -> Comparison:
        op = self._next("op", "a compare operator")
        if op not in COMPARE_OPS:
            raise FilterError(f"{self.name}: Invalid compare operator {op!r}")
        comparator = Comparator.parse(self.quoted())
        if equality_only_check and comparator.equality_only and op not in {b"=", b"!="}:
            raise FilterError(
                "A regexstring comparator and substring comparator can only be used with EQUAL and NOT_EQUAL"
            )
        return Comparison(op, comparator)

    def column(self) -> bytes:
        family = self.quoted()
        return family + b":" + self.quoted()


Builder = Callable[[list[Arg]], Filter]


def _compare(cls: type[RowFilter | FamilyFilter | QualifierFilter | ValueFilter]) -> Builder:
    return lambda args: cls(_Args(cls.__name__, args, [2]).comparison())


def _single_column_value(exclude: bool) -> Builder:
    name = "SingleColumnValueExcludeFilter" if exclude else "SingleColumnValueFilter"

    def build(args: list[Arg]) -> Filter:
        a = _Args(name, args, [4, 6])
        column, comparison = a.column(), a.comparison()
        flags = (a.boolean(), a.boolean()) if len(args) == 6 else (False, True)
        return SingleColumnValueFilter(column, comparison, *flags, exclude=exclude)

    return build


def _key_only(args: list[Arg]) -> Filter:
    a = _Args("KeyOnlyFilter", args, [0, 1])
    return KeyOnlyFilter(a.boolean() if args else False)


def _first_key_only(args: list[Arg]) -> Filter:
    _Args("FirstKeyOnlyFilter", args, [0])
    return FirstKeyOnlyFilter()


def _multiple_column_prefix(args: list[Arg]) -> Filter:
    a = _Args("MultipleColumnPrefixFilter", args, range(1, len(args) + 1))
    return MultipleColumnPrefixFilter([a.quoted() for _ in args])


def _column_range(args: list[Arg]) -> Filter:
    a = _Args("ColumnRangeFilter", args, [4])
    low, low_inclusive, high, high_inclusive = a.quoted(), a.boolean(), a.quoted(), a.boolean()
    return ColumnRangeFilter(low or None, low_inclusive, high or None, high_inclusive)


def _dependent_column(args: list[Arg]) -> Filter:
    a = _Args("DependentColumnFilter", args, [2, 3, 5])
    column = a.column()
    drop = a.boolean() if len(args) >= 3 else False
    comparison = a.comparison(equality_only_check=False) if len(args) == 5 else None
    return DependentColumnFilter(column, drop, comparison)


def _timestamps(args: list[Arg]) -> Filter:
    a = _Args("TimestampsFilter", args, [len(args)])
    return TimestampsFilter([a.integer(0, _LONG_MAX) for _ in args])


def _column_value(args: list[Arg]) -> Filter:
    a = _Args("ColumnValueFilter", args, [4])
    return ColumnValueFilter(a.column(), a.comparison())


def _one_int(cls: type[PageFilter | ColumnCountGetFilter]) -> Builder:
    return lambda args: cls(_Args(cls.__name__, args, [1]).integer(0))


def _one_quoted(cls: type[PrefixFilter | ColumnPrefixFilter | InclusiveStopFilter]) -> Builder:
    return lambda args: cls(_Args(cls.__name__, args, [1]).quoted())


def _column_pagination(args: list[Arg]) -> Filter:
    a = _Args("ColumnPaginationFilter", args, [2])
    return ColumnPaginationFilter(a.integer(0), a.integer(0))


BUILDERS: dict[bytes, Builder] = {
    b"KeyOnlyFilter": _key_only,
    b"FirstKeyOnlyFilter": _first_key_only,
    b"PrefixFilter": _one_quoted(PrefixFilter),
    b"ColumnPrefixFilter": _one_quoted(ColumnPrefixFilter),
    b"MultipleColumnPrefixFilter": _multiple_column_prefix,
    b"ColumnCountGetFilter": _one_int(ColumnCountGetFilter),
    b"PageFilter": _one_int(PageFilter),
    b"ColumnPaginationFilter": _column_pagination,
    b"InclusiveStopFilter": _one_quoted(InclusiveStopFilter),
    b"TimestampsFilter": _timestamps,
    b"RowFilter": _compare(RowFilter),
    b"FamilyFilter": _compare(FamilyFilter),
    b"QualifierFilter": _compare(QualifierFilter),
    b"ValueFilter": _compare(ValueFilter),
    b"ColumnRangeFilter": _column_range,
    b"SingleColumnValueFilter": _single_column_value(exclude=False),
    b"SingleColumnValueExcludeFilter": _single_column_value(exclude=True),
    b"DependentColumnFilter": _dependent_column,
    b"ColumnValueFilter": _column_value,
}
"""Exactly the filters ParseFilter registers (HBase 2.x)."""


# --- grammar -----------------------------------------------------------------------------------


class _Parser:
    def __init__(self, text: bytes) -> None:
        self.tokens = _tokenize(text)
        self.i = 0

    def peek(self) -> _Token:
        return self.tokens[self.i]

    def take(self, kind: str, value: bytes | None = None) -> _Token:
        tok = self.peek()
        if tok.kind != kind or (value is not None and tok.value != value):
            wanted = value.decode() if value is not None else kind
            got = tok.value.decode("utf-8", "replace") or "end of string"
            raise FilterError(f"expected {wanted} at offset {tok.pos}, got {got!r}")
        self.i += 1
        return tok

    def at_keyword(self, word: bytes) -> bool:
        tok = self.peek()
        return tok.kind == "word" and tok.value == word

    def at_punct(self, value: bytes) -> bool:
        tok = self.peek()
        return tok.kind == "punct" and tok.value == value

    def parse(self) -> Filter:
        flt = self.expr()
        self.take("end")
        return flt

    def expr(self) -> Filter:
        children = [self.conjunction()]
        while self.at_keyword(b"OR"):
            self.i += 1
            children.append(self.conjunction())
        return children[0] if len(children) == 1 else FilterListOr(children)

    def conjunction(self) -> Filter:
        children = [self.unary()]
        while self.at_keyword(b"AND"):
            self.i += 1
            children.append(self.unary())
        return children[0] if len(children) == 1 else FilterListAnd(children)

    def unary(self) -> Filter:
        if self.at_keyword(b"SKIP"):
            self.i += 1
            return SkipFilter(self.unary())
        if self.at_keyword(b"WHILE"):
            self.i += 1
            return WhileMatchFilter(self.unary())
        if self.at_punct(b"("):
            self.i += 1
            inner = self.expr()
            self.take("punct", b")")
            return inner
        return self.call()

    def call(self) -> Filter:
        name = self.take("word")
        if name.value in _KEYWORDS:
            raise FilterError(f"unexpected {name.value.decode()} at offset {name.pos}")
        builder = BUILDERS.get(name.value)
        if builder is None:
            raise FilterError(f"Filter Name {name.value.decode('utf-8', 'replace')} not supported")
        self.take("punct", b"(")
        args: list[Arg] = []
        if not self.at_punct(b")"):
            while True:
                tok = self.peek()
                if tok.kind not in {"quoted", "op", "number", "word"}:
                    raise FilterError(f"bad argument at offset {tok.pos}")
                self.i += 1
                args.append((tok.kind, tok.value))
                if not self.at_punct(b","):
                    break
                self.i += 1
        self.take("punct", b")")
        return builder(args)


def parse_filter(text: bytes | str) -> Filter:
    """Parse an HBase filter string; raises FilterError on anything ParseFilter would reject."""
    data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
    if not data.strip():
        raise FilterError("Incorrect Filter String")
    return _Parser(data).parse()
