"""HBase's Thrift filter language (``ParseFilter``): a sans-IO parser and row evaluator.

Why sans-IO: the grammar and the HBase comparison rules (which are easy to get backwards) are
tested on their own, with no server, and the store stays ignorant of filters.

Grammar, as HBase's ParseFilter has it (precedence SKIP/WHILE > AND > OR)::

    expr    := and ("OR" and)*
    and     := unary ("AND" unary)*
    unary   := ("SKIP" | "WHILE") unary | "(" expr ")" | Name "(" [arg ("," arg)*] ")"
    arg     := 'quoted'  ('' escapes a quote) | compare-op | integer | true | false

Evaluation works a row at a time, on the cells the read returns (see ``cells.VersionPolicy``):
each filter says whether it keeps the row and which cells it keeps; AND intersects, OR unites
the children that keep the row. This is HBase's FilterList semantics without its per-cell state
machine. Known departures from HBase, chosen for predictability:

* cell filters see the versions the read returns (the latest one for scans), not every stored
  version, unless a SingleColumnValueFilter with ``latestVersionOnly=false`` asks for all;
* PageFilter limits the rows of the whole scan (there is a single region), the smallest one wins.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from .cells import Cell, split_column


class FilterError(ValueError):
    """A filter string HBase's ParseFilter would reject; the client gets IllegalArgument."""


# --- comparisons -------------------------------------------------------------------------------

# HBase's CompareFilter: ``r = comparator.compareTo(cell_bytes)`` (comparator value first), and the
# cell is kept when this holds. LESS keeps cells smaller than the comparator value, and so on.
_KEEP: dict[bytes, Callable[[int], bool]] = {
    b"<": lambda r: r > 0,
    b"<=": lambda r: r >= 0,
    b"=": lambda r: r == 0,
    b"!=": lambda r: r != 0,
    b">=": lambda r: r <= 0,
    b">": lambda r: r < 0,
}


def _cmp(a: bytes, b: bytes) -> int:
    return (a > b) - (a < b)


@dataclass(frozen=True)
class Comparator:
    """``'binary:v'``, ``'binaryprefix:v'``, ``'substring:v'`` or ``'regexstring:v'``."""

    kind: str
    value: bytes
    _regex: re.Pattern[bytes] | None = field(default=None, compare=False, repr=False)

    @classmethod
    def parse(cls, text: bytes) -> Comparator:
        kind, sep, value = text.partition(b":")
        name = kind.decode("ascii", "replace").lower()
        if not sep or name not in {"binary", "binaryprefix", "substring", "regexstring"}:
            raise FilterError(f"unknown comparator {text!r} (want binary:, binaryprefix:, substring:, regexstring:)")
        if name == "regexstring":
            try:
                # Java's RegexStringComparator defaults to DOTALL and uses find(), i.e. search.
                return cls(name, value, re.compile(value, re.DOTALL))
            except re.error as exc:
                raise FilterError(f"bad regular expression {value!r}: {exc}") from None
        if name == "substring":
            return cls(name, value.lower())  # SubstringComparator is case-insensitive
        return cls(name, value)

    @property
    def equality_only(self) -> bool:
        return self.kind in {"substring", "regexstring"}

    def compare_to(self, data: bytes) -> int:
        if self.kind == "binary":
            return _cmp(self.value, data)
        if self.kind == "binaryprefix":
            return _cmp(self.value, data[: len(self.value)])
        if self.kind == "substring":
            return 0 if self.value in data.lower() else 1
        assert self._regex is not None
        return 0 if self._regex.search(data) else 1


@dataclass(frozen=True)
class Comparison:
    op: bytes
    comparator: Comparator

    def __post_init__(self) -> None:
        if self.comparator.equality_only and self.op not in {b"=", b"!="}:
            raise FilterError(
                f"only = and != are valid with a {self.comparator.kind} comparator, not {self.op.decode()}"
            )

    def keeps(self, data: bytes) -> bool:
        return _KEEP[self.op](self.comparator.compare_to(data))


# --- evaluation ----------------------------------------------------------------------------------

STRIP_NONE, STRIP_EMPTY, STRIP_LENGTH = 0, 1, 2


@dataclass(slots=True)
class Outcome:
    """What one filter decides about one row. ``mask`` None means every cell is kept."""

    keep_row: bool
    mask: list[bool] | None = None
    strip: int = STRIP_NONE
    stop: bool = False


class Filter:
    """A node of a parsed filter string."""

    def evaluate(self, row: bytes, cells: Sequence[Cell]) -> Outcome:
        raise NotImplementedError

    def page_limit(self) -> int | None:
        return None

    def needs_all_versions(self) -> bool:
        return False

    def row_prefix(self) -> bytes | None:
        """A prefix every row that can pass must have: lets a scan narrow its key range."""
        return None


def apply(flt: Filter, row: bytes, cells: Sequence[Cell]) -> tuple[list[Cell] | None, bool]:
    """Run ``flt`` on one row: (cells to return or None if the row is dropped, stop the scan)."""
    out = flt.evaluate(row, cells)
    if not out.keep_row:
        return None, out.stop
    kept = list(cells) if out.mask is None else [c for c, keep in zip(cells, out.mask, strict=True) if keep]
    if not kept:
        return None, out.stop
    if out.strip == STRIP_EMPTY:
        kept = [(c, ts, b"") for c, ts, _ in kept]
    elif out.strip == STRIP_LENGTH:
        kept = [(c, ts, struct.pack(">i", len(v))) for c, ts, v in kept]
    return kept, out.stop


class _CellFilter(Filter):
    """Keeps the row; keeps the cells ``keeps_cell`` accepts."""

    def keeps_cell(self, cell: Cell) -> bool:
        raise NotImplementedError

    def evaluate(self, row: bytes, cells: Sequence[Cell]) -> Outcome:
        return Outcome(True, [self.keeps_cell(c) for c in cells])


@dataclass(frozen=True)
class ValueFilter(_CellFilter):
    comparison: Comparison

    def keeps_cell(self, cell: Cell) -> bool:
        return self.comparison.keeps(cell[2])


@dataclass(frozen=True)
class QualifierFilter(_CellFilter):
    comparison: Comparison

    def keeps_cell(self, cell: Cell) -> bool:
        return self.comparison.keeps(split_column(cell[0])[1] or b"")


@dataclass(frozen=True)
class FamilyFilter(_CellFilter):
    comparison: Comparison

    def keeps_cell(self, cell: Cell) -> bool:
        return self.comparison.keeps(split_column(cell[0])[0])


@dataclass(frozen=True)
class ColumnPrefixFilter(_CellFilter):
    prefixes: tuple[bytes, ...]

    def keeps_cell(self, cell: Cell) -> bool:
        return (split_column(cell[0])[1] or b"").startswith(self.prefixes)


@dataclass(frozen=True)
class RowFilter(Filter):
    comparison: Comparison

    def evaluate(self, row: bytes, cells: Sequence[Cell]) -> Outcome:
        return Outcome(self.comparison.keeps(row))


@dataclass(frozen=True)
class PrefixFilter(Filter):
    prefix: bytes

    def evaluate(self, row: bytes, cells: Sequence[Cell]) -> Outcome:
        return Outcome(row.startswith(self.prefix))

    def row_prefix(self) -> bytes | None:
        return self.prefix


@dataclass(frozen=True)
class KeyOnlyFilter(Filter):
    length_as_value: bool = False

    def evaluate(self, row: bytes, cells: Sequence[Cell]) -> Outcome:
        return Outcome(True, strip=STRIP_LENGTH if self.length_as_value else STRIP_EMPTY)


@dataclass(frozen=True)
class FirstKeyOnlyFilter(Filter):
    def evaluate(self, row: bytes, cells: Sequence[Cell]) -> Outcome:
        return Outcome(True, [i == 0 for i in range(len(cells))])


@dataclass(frozen=True)
class PageFilter(Filter):
    size: int

    def evaluate(self, row: bytes, cells: Sequence[Cell]) -> Outcome:
        return Outcome(True)

    def page_limit(self) -> int | None:
        return self.size


@dataclass(frozen=True)
class SingleColumnValueFilter(Filter):
    """Keeps rows whose ``family:qualifier`` value passes the comparison.

    ``filter_if_missing`` drops rows without the column (HBase's default keeps them);
    ``exclude`` is SingleColumnValueExcludeFilter, which also hides the tested column.
    """

    column: bytes
    comparison: Comparison
    filter_if_missing: bool = False
    latest_version_only: bool = True
    exclude: bool = False

    def evaluate(self, row: bytes, cells: Sequence[Cell]) -> Outcome:
        values = [v for c, _ts, v in cells if c == self.column]
        if not values:
            return Outcome(not self.filter_if_missing)
        tested = values[:1] if self.latest_version_only else values
        keep = any(self.comparison.keeps(v) for v in tested)
        mask = [c != self.column for c, _ts, _v in cells] if self.exclude else None
        return Outcome(keep, mask)

    def needs_all_versions(self) -> bool:
        return not self.latest_version_only


@dataclass(frozen=True)
class SkipFilter(Filter):
    """SKIP: drop the whole row if the inner filter drops any of its cells."""

    inner: Filter

    def evaluate(self, row: bytes, cells: Sequence[Cell]) -> Outcome:
        out = self.inner.evaluate(row, cells)
        keep = out.keep_row and (out.mask is None or all(out.mask))
        return Outcome(keep, None, out.strip, out.stop)

    def page_limit(self) -> int | None:
        return self.inner.page_limit()

    def needs_all_versions(self) -> bool:
        return self.inner.needs_all_versions()

    def row_prefix(self) -> bytes | None:
        return self.inner.row_prefix()


@dataclass(frozen=True)
class WhileFilter(Filter):
    """WHILE: end the whole scan at the first row the inner filter would drop (or trim)."""

    inner: Filter

    def evaluate(self, row: bytes, cells: Sequence[Cell]) -> Outcome:
        out = self.inner.evaluate(row, cells)
        if out.keep_row and (out.mask is None or all(out.mask)):
            return Outcome(True, None, out.strip, out.stop)
        return Outcome(False, stop=True)

    def page_limit(self) -> int | None:
        return self.inner.page_limit()

    def needs_all_versions(self) -> bool:
        return self.inner.needs_all_versions()


def _merge_masks(masks: list[list[bool] | None], size: int, combine: Callable[[list[bool]], bool]) -> list[bool] | None:
    if all(m is None for m in masks):
        return None
    full = [m if m is not None else [True] * size for m in masks]
    return [combine(list(bits)) for bits in zip(*full, strict=True)]


@dataclass(frozen=True)
class AndFilter(Filter):
    children: tuple[Filter, ...]

    def evaluate(self, row: bytes, cells: Sequence[Cell]) -> Outcome:
        outs = [c.evaluate(row, cells) for c in self.children]
        stop = any(o.stop for o in outs)
        if not all(o.keep_row for o in outs):
            return Outcome(False, stop=stop)
        mask = _merge_masks([o.mask for o in outs], len(cells), all)
        return Outcome(True, mask, max(o.strip for o in outs), stop)

    def page_limit(self) -> int | None:
        return _smallest(c.page_limit() for c in self.children)

    def needs_all_versions(self) -> bool:
        return any(c.needs_all_versions() for c in self.children)

    def row_prefix(self) -> bytes | None:
        return next((p for c in self.children if (p := c.row_prefix()) is not None), None)


@dataclass(frozen=True)
class OrFilter(Filter):
    children: tuple[Filter, ...]

    def evaluate(self, row: bytes, cells: Sequence[Cell]) -> Outcome:
        outs = [c.evaluate(row, cells) for c in self.children]
        stop = all(o.stop for o in outs)
        keepers = [o for o in outs if o.keep_row]
        if not keepers:
            return Outcome(False, stop=stop)
        mask = _merge_masks([o.mask for o in keepers], len(cells), any)
        return Outcome(True, mask, max(o.strip for o in keepers), stop)

    def page_limit(self) -> int | None:
        return _smallest(c.page_limit() for c in self.children)

    def needs_all_versions(self) -> bool:
        return any(c.needs_all_versions() for c in self.children)

    def row_prefix(self) -> bytes | None:
        prefixes = {c.row_prefix() for c in self.children}
        return prefixes.pop() if len(prefixes) == 1 else None


def _smallest(values: Iterable[int | None]) -> int | None:
    present = [v for v in values if v is not None]
    return min(present) if present else None


# --- parsing -----------------------------------------------------------------------------------

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


Arg = tuple[str, bytes]
_Builder = Callable[[list[Arg]], Filter]


def _want(args: list[Arg], kinds: Sequence[str], name: str) -> list[bytes]:
    if len(args) != len(kinds) or any(a[0] != k for a, k in zip(args, kinds, strict=False)):
        shown = ", ".join(kinds) or "no arguments"
        raise FilterError(f"{name} takes ({shown}), got ({', '.join(a[0] for a in args) or 'nothing'})")
    return [a[1] for a in args]


def _boolean(value: bytes, name: str) -> bool:
    low = value.lower()
    if low not in {b"true", b"false"}:
        raise FilterError(f"{name}: expected true or false, got {value!r}")
    return low == b"true"


def _compare_builder(cls: type) -> _Builder:
    def build(args: list[Arg]) -> Filter:
        op, comparator = _want(args, ["op", "quoted"], cls.__name__)
        return cls(Comparison(op, Comparator.parse(comparator)))

    return build


def _scvf_builder(exclude: bool) -> _Builder:
    name = "SingleColumnValueExcludeFilter" if exclude else "SingleColumnValueFilter"

    def build(args: list[Arg]) -> Filter:
        if len(args) == 6:
            family, qualifier, op, comparator, missing, latest = _want(
                args, ["quoted", "quoted", "op", "quoted", "word", "word"], name
            )
            flags = (_boolean(missing, name), _boolean(latest, name))
        else:
            family, qualifier, op, comparator = _want(args, ["quoted", "quoted", "op", "quoted"], name)
            flags = (False, True)
        comparison = Comparison(op, Comparator.parse(comparator))
        return SingleColumnValueFilter(family + b":" + qualifier, comparison, *flags, exclude=exclude)

    return build


def _key_only(args: list[Arg]) -> Filter:
    if not args:
        return KeyOnlyFilter()
    (flag,) = _want(args, ["word"], "KeyOnlyFilter")
    return KeyOnlyFilter(_boolean(flag, "KeyOnlyFilter"))


def _first_key_only(args: list[Arg]) -> Filter:
    _want(args, [], "FirstKeyOnlyFilter")
    return FirstKeyOnlyFilter()


def _page(args: list[Arg]) -> Filter:
    (size,) = _want(args, ["number"], "PageFilter")
    if int(size) < 0:
        raise FilterError("PageFilter size must be >= 0")
    return PageFilter(int(size))


def _multiple_prefixes(args: list[Arg]) -> Filter:
    prefixes = _want(args, ["quoted"] * max(1, len(args)), "MultipleColumnPrefixFilter")
    return ColumnPrefixFilter(tuple(prefixes))


_BUILDERS: dict[bytes, _Builder] = {
    b"KeyOnlyFilter": _key_only,
    b"FirstKeyOnlyFilter": _first_key_only,
    b"PrefixFilter": lambda a: PrefixFilter(*_want(a, ["quoted"], "PrefixFilter")),
    b"ColumnPrefixFilter": lambda a: ColumnPrefixFilter(tuple(_want(a, ["quoted"], "ColumnPrefixFilter"))),
    b"MultipleColumnPrefixFilter": _multiple_prefixes,
    b"PageFilter": _page,
    b"RowFilter": _compare_builder(RowFilter),
    b"FamilyFilter": _compare_builder(FamilyFilter),
    b"QualifierFilter": _compare_builder(QualifierFilter),
    b"ValueFilter": _compare_builder(ValueFilter),
    b"SingleColumnValueFilter": _scvf_builder(exclude=False),
    b"SingleColumnValueExcludeFilter": _scvf_builder(exclude=True),
}


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

    def parse(self) -> Filter:
        flt = self.expr()
        self.take("end")
        return flt

    def expr(self) -> Filter:
        children = [self.conjunction()]
        while self.at_keyword(b"OR"):
            self.i += 1
            children.append(self.conjunction())
        return children[0] if len(children) == 1 else OrFilter(tuple(children))

    def conjunction(self) -> Filter:
        children = [self.unary()]
        while self.at_keyword(b"AND"):
            self.i += 1
            children.append(self.unary())
        return children[0] if len(children) == 1 else AndFilter(tuple(children))

    def unary(self) -> Filter:
        if self.at_keyword(b"SKIP"):
            self.i += 1
            return SkipFilter(self.unary())
        if self.at_keyword(b"WHILE"):
            self.i += 1
            return WhileFilter(self.unary())
        if self.peek().kind == "punct" and self.peek().value == b"(":
            self.i += 1
            inner = self.expr()
            self.take("punct", b")")
            return inner
        return self.call()

    def call(self) -> Filter:
        name = self.take("word")
        if name.value in _KEYWORDS:
            raise FilterError(f"unexpected {name.value.decode()} at offset {name.pos}")
        builder = _BUILDERS.get(name.value)
        if builder is None:
            raise FilterError(f"unknown filter {name.value.decode('utf-8', 'replace')!r}")
        self.take("punct", b"(")
        args: list[Arg] = []
        if not (self.peek().kind == "punct" and self.peek().value == b")"):
            while True:
                tok = self.peek()
                if tok.kind not in {"quoted", "op", "number", "word"}:
                    raise FilterError(f"bad argument at offset {tok.pos}")
                self.i += 1
                args.append((tok.kind, tok.value))
                if self.peek().kind == "punct" and self.peek().value == b",":
                    self.i += 1
                    continue
                break
        self.take("punct", b")")
        return builder(args)


def parse_filter(text: bytes | str) -> Filter:
    """Parse an HBase filter string; raises FilterError on anything ParseFilter would reject."""
    data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
    if not data.strip():
        raise FilterError("empty filter string")
    return _Parser(data).parse()
