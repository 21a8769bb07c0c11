"""The plate watchlist: exact and fuzzy matching in O(1) whatever the number of watched plates.

Plate recognisers confuse characters that look alike (0/D/Q/O, 8/B, 1/I, 2/Z, 5/S, 6/G). Each plate is
also filed under its *class key*, every character replaced by its confusion class, so a misread plate
finds the watched one with one dictionary lookup. A fuzzy hit then also requires that the two readings
differ in at most one character (one misread glyph, not a different car that happens to look similar).
"""

from __future__ import annotations

from dataclasses import dataclass

from contracts.surveillance import WatchCommand

CONFUSABLE = ("0DOQ", "8B", "1I", "2Z", "5S", "6G")
"""OCR confusion classes; the first character of each stands for the class."""
_CLASS = str.maketrans({c: group[0] for group in CONFUSABLE for c in group})
MAX_SUBSTITUTIONS = 1


def class_key(plate: str) -> str:
    return plate.translate(_CLASS)


@dataclass(frozen=True)
class PlateMatch:
    watch: WatchCommand
    match: str
    """``exact`` or ``fuzzy``."""
    score: float


class PlateWatchlist:
    """Watched plates by class key; scope and expiry are checked on the (few) candidates of a lookup."""

    def __init__(self, fuzzy: bool = True) -> None:
        self.fuzzy = fuzzy
        self._watches: dict[str, WatchCommand] = {}
        self._by_class: dict[str, dict[str, WatchCommand]] = {}

    def __len__(self) -> int:
        return len(self._watches)

    def add(self, watch: WatchCommand) -> None:
        """Add or replace (a command published again under the same id replaces the watch)."""
        if watch.plate is None:
            raise ValueError(f"watch {watch.watch_id} is not a plate watch")
        self.remove(watch.watch_id)
        self._watches[watch.watch_id] = watch
        self._by_class.setdefault(class_key(watch.plate), {})[watch.watch_id] = watch

    def remove(self, watch_id: str) -> bool:
        watch = self._watches.pop(watch_id, None)
        if watch is None or watch.plate is None:
            return False
        key = class_key(watch.plate)
        bucket = self._by_class[key]
        del bucket[watch_id]
        if not bucket:
            del self._by_class[key]
        return True

    def match(self, plate: str, checkpoint_id: str, district: str | None, now_ms: int) -> list[PlateMatch]:
        """The watches this reading hits at this checkpoint, now (expired watches are dropped)."""
        bucket = self._by_class.get(class_key(plate))
        if not bucket:
            return []
        found = []
        for watch in list(bucket.values()):
            if not watch.active(now_ms):
                self.remove(watch.watch_id)
                continue
            if not watch.in_scope(checkpoint_id, district):
                continue
            assert watch.plate is not None
            if watch.plate == plate:
                found.append(PlateMatch(watch, "exact", 1.0))
            elif self.fuzzy and len(watch.plate) == len(plate):
                differing = sum(a != b for a, b in zip(watch.plate, plate, strict=True))
                if differing <= MAX_SUBSTITUTIONS:
                    found.append(PlateMatch(watch, "fuzzy", 1.0 - differing / len(plate)))
        return found
