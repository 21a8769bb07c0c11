"""Watchlists and live statistics for the console: commands out to the control topics, state folded in.

The console never matches anything itself (issue 12): it validates a command with the same contract
functions the surveillance service uses (:mod:`contracts.surveillance`), publishes it on the compacted
control topic (a removal or stop is a tombstone), and shows what the service made of it. What it shows
is folded from the bus by the SSE hub's consumer thread, so a list costs no bus round trip:

- ``control.watchlist`` / ``control.stats`` from their beginning: the current watches and statistics
  (the same compacted log the service rebuilds itself from);
- ``surveillance.replies`` from its beginning: accepted / rejected (with the reason) / removed;
- ``surveillance.stats`` over the last hour: the latest value per window and group of each statistic.

Hits come from HBase (the hit loader's tables), where they survive restarts and exist at the DR site.

Anyone may write to these topics. A command is read with the contract functions the service applies
(a record the service rejects removes its key's command there, as the latest record of a key is the
command, so it does here too); a reply or a result that is not shaped like one is set aside. Either is
counted and logged (``web.metrics.skipped``), so what the pages show always fits their models.
"""

from __future__ import annotations

import heapq
import itertools
import json
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import happybase
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import NewTopic
from pydantic import ValidationError
from thriftpy2.thrift import TException

from contracts.deployment_map import MapError
from contracts.records import CITY_TZ, Kind, format_time
from contracts.surveillance import (
    ACCEPTED,
    REJECTED,
    REMOVED,
    REPLY_COMMANDS,
    CommandError,
    StatCommand,
    parse_lane_group,
    stat_from_json,
    watch_from_json,
)
from contracts.tables import surveillance as layout

from ..backends import BUS, Backends, BackendUnavailable
from ..events import EventHub, HistorySpec
from ..metrics import skipped
from ..models.surveillance import StatResult
from .captures import Locate, capture_detail, decode_cursor, encode_cursor, is_missing_table
from .deployment import MapStore
from .errors import Invalid, NotFound

RESULTS_SINCE_S = 3600.0
"""How far back the console reads statistic results at start (the charts show the last hour)."""
MAX_WINDOWS = 240
"""Windows kept per statistic (oldest dropped first): a chart's worth, whatever the window size."""
COUNT_CAP = 10_000
"""A watch's hit count is counted up to this many (shown as "at least")."""
COMPACTED = {"cleanup.policy": "compact"}
READER = "surveillance"
"""This reader's label in ``console_bus_records_skipped_total``."""


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def _invalid(exc: CommandError) -> Invalid:
    return Invalid(exc.field, exc.reason)


def _object(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise CommandError("value", f"not a JSON object: {type(value).__name__}")
    return value


def watch_value(value: Any, key: bytes) -> dict[str, Any]:
    """A ``control.watchlist`` value as the console keeps it: the command as the service reads it, plus
    the face capture it was taken from (text, when there is one); CommandError when the service rejects it."""
    data = _object(value)
    command = watch_from_json(data, key).to_json()
    return {**command, "capture": data["capture"]} if isinstance(data.get("capture"), str) else command


def stat_value(value: Any, key: bytes) -> dict[str, Any]:
    """A ``control.stats`` value as the service reads it; CommandError when the service rejects it."""
    return stat_from_json(_object(value), key).to_json()


SHOWN_WHEN_REJECTED = ("kind", "requested_by", "requested_at", "reason")
"""The text fields of a rejected watch command the watchlist page still shows (each at most MAX_SHOWN long)."""
MAX_SHOWN = 200


def read_command(topic: str, key: bytes, value: Any,
                 read: Callable[[Any, bytes], dict[str, Any]]) -> dict[str, Any] | None:
    """The command a control record holds; None for a tombstone. A command the service rejects (it removes the
    key's command there too) is counted, and on the watchlist still shown as rejected (`rejected_watch`)."""
    if value is None:
        return None
    try:
        return read(value, key)
    except CommandError as exc:
        skipped(READER, topic, "rejected command", exc)
        return rejected_watch(value, exc) if read is watch_value else None


def rejected_watch(value: Any, exc: CommandError) -> dict[str, Any] | None:
    """What the watchlist shows of a watch command the service rejects (a JSON object, say one written by hand):
    its short text fields and why it was rejected, so an operator sees that the command failed instead of it
    vanishing; None for a value that is not a JSON object."""
    if not isinstance(value, dict):
        return None
    shown = {name: value[name] for name in SHOWN_WHEN_REJECTED
             if isinstance(value.get(name), str) and len(value[name]) <= MAX_SHOWN}
    kind = shown.get("kind") if shown.get("kind") in ("plate", "face") else "unknown"
    return {**shown, "kind": kind, "rejected": f"{exc.field}: {exc.reason}"[:1000]}


def reply_problem(value: Any) -> str | None:
    """Why a ``surveillance.replies`` value is not a reply the pages can show (None when it is one)."""
    if not isinstance(value, dict):
        return "not a JSON object"
    if value.get("command") not in REPLY_COMMANDS or not isinstance(value.get("id"), str) or not value["id"]:
        return "no command or id"
    if value.get("status") not in (ACCEPTED, REJECTED, REMOVED):
        return "unknown status"
    if not all(isinstance(value.get(name), str | None) for name in ("reason", "time")):
        return "reason or time not text"
    return None


class SurveillanceConsole:
    def __init__(self, backends: Backends, hub: EventHub) -> None:
        self.backends = backends
        self.topics = backends.settings.topics
        self._lock = threading.Lock()
        self._watches: dict[str, dict[str, Any]] = {}
        self._stats: dict[str, dict[str, Any]] = {}
        self._replies: dict[tuple[str, str], dict[str, Any]] = {}
        self._results: dict[str, OrderedDict[tuple[str, str], dict[str, Any]]] = {}
        self._producer: Producer | None = None
        self._known_topics: set[str] = set()
        t = self.topics
        for topic in (t.control_watchlist, t.control_stats, t.surveillance_replies):
            hub.history[topic] = HistorySpec()
        hub.history[t.surveillance_stats] = HistorySpec(since_s=RESULTS_SINCE_S)
        self._hub = hub
        hub.add_listener(self._fold)

    # -- the fold (hub consumer thread) -----------------------------------------------------------
    def _fold(self, topic: str, key: bytes | None, value: Any, _timestamp: int) -> None:
        t = self.topics
        if topic in (t.control_watchlist, t.control_stats):
            if key is None:
                skipped(READER, topic, "no key", "a command is keyed by its id")
                return
            ident = key.decode("utf-8", "replace")
            command = read_command(topic, key, value, watch_value if topic == t.control_watchlist else stat_value)
            with self._lock:
                table = self._watches if topic == t.control_watchlist else self._stats
                if command is not None:
                    table[ident] = command
                else:
                    table.pop(ident, None)
                    if topic == t.control_stats:
                        self._results.pop(ident, None)
        elif topic == t.surveillance_replies:
            problem = reply_problem(value)
            if problem is not None:
                skipped(READER, topic, problem)
                return
            with self._lock:
                self._replies[(value["command"], value["id"])] = value
        elif topic == t.surveillance_stats:
            try:
                StatResult.model_validate(value)
            except ValidationError as exc:
                first = exc.errors()[0]
                skipped(READER, topic, "malformed result", f"{'.'.join(map(str, first['loc']))}: {first['msg']}")
                return
            with self._lock:
                self._result(value)

    def _result(self, value: dict[str, Any]) -> None:
        stat_id = value["stat_id"]
        if stat_id not in self._stats:
            return  # a result of a statistic that was stopped (or never started here)
        windows = self._results.setdefault(stat_id, OrderedDict())
        slot = (str(value.get("window_start")), str(value.get("group")))
        if windows.get(slot, {}).get("final") and not value.get("final"):
            return  # a late partial never overwrites the final value
        windows[slot] = value
        while len({start for start, _group in windows}) > MAX_WINDOWS:
            windows.popitem(last=False)

    def loaded(self) -> bool:
        """True once the control topics and replies the bus held at start have been read."""
        t = self.topics
        return all(self._hub.history_loaded(topic)
                   for topic in (t.control_watchlist, t.control_stats, t.surveillance_replies))

    def _reply(self, command: str, ident: str) -> dict[str, Any]:
        reply = self._replies.get((command, ident))
        if reply is None:
            return {"status": "pending", "status_reason": "", "status_time": None}
        return {"status": reply.get("status"), "status_reason": reply.get("reason") or "",
                "status_time": reply.get("time")}

    # -- publishing -------------------------------------------------------------------------------
    def _publish(self, topic: str, key: str, value: Mapping[str, Any] | None) -> None:
        """Write one command and wait for the broker's acknowledgement (503 ``bus`` if none comes)."""
        timeout = self.backends.settings.backend_timeout_s
        self._ensure_topic(topic)
        with self._lock:
            if self._producer is None:
                self._producer = Producer({**self.backends.settings.bus, "enable.idempotence": True, "acks": "all",
                                           "linger.ms": 0, "message.timeout.ms": int(timeout * 1000), "log_level": 3})
            producer = self._producer
        outcome: list[KafkaError | None] = []
        raw = None if value is None else json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()
        try:
            producer.produce(topic, raw, key=key.encode(), on_delivery=lambda error, _msg: outcome.append(error))
        except (BufferError, KafkaException) as exc:
            raise BackendUnavailable(BUS, str(exc)) from None
        producer.flush(timeout)
        if not outcome:
            raise BackendUnavailable(BUS, f"no acknowledgement within {timeout:g} s")
        if outcome[0] is not None:
            raise BackendUnavailable(BUS, outcome[0].str())

    def _ensure_topic(self, topic: str) -> None:
        """A control topic must be compacted: create it so if nobody has yet (never left to auto-creation).

        Asks for all topics, not this one: a metadata request naming a missing topic may auto-create it
        with the broker's default (delete) policy.
        """
        if topic in self._known_topics:
            return
        admin = self.backends.bus_admin()
        try:
            metadata = admin.list_topics(timeout=self.backends.settings.backend_timeout_s)
        except KafkaException as exc:
            raise BackendUnavailable(BUS, str(exc.args[0] if exc.args else exc)) from None
        if topic not in metadata.topics:
            try:
                self.backends.bus_call(admin.create_topics([NewTopic(topic, 1, config=COMPACTED)])[topic])
            except BackendUnavailable as exc:
                if "TOPIC_ALREADY_EXISTS" not in exc.error:
                    raise
        self._known_topics.add(topic)

    # -- watches ----------------------------------------------------------------------------------
    def add_watch(self, body: Mapping[str, Any], username: str, conn_for_capture: Any = None) -> dict[str, Any]:
        """Validate and publish a new watch; a face may come from a face capture's feature (``capture``)."""
        value = {k: v for k, v in body.items() if v is not None and k != "capture"}
        if body.get("capture"):
            value["feature"] = self._capture_feature(conn_for_capture, str(body["capture"]))
            value["capture"] = body["capture"]
        now = datetime.now(UTC)
        value.update(watch_id=f"{body.get('kind', 'watch')}-{uuid.uuid4().hex[:16]}", requested_by=username,
                     requested_at=now.isoformat(timespec="milliseconds"))
        expiry_days = self.backends.settings.watch_expiry_days
        if "expires_at" not in value and expiry_days:
            value["expires_at"] = (now + timedelta(days=expiry_days)).isoformat(timespec="milliseconds")
        try:
            command = watch_from_json(value)
        except CommandError as exc:
            raise _invalid(exc) from None
        published = {**command.to_json(), **({"capture": value["capture"]} if "capture" in value else {})}
        self._publish(self.topics.control_watchlist, command.watch_id, published)
        with self._lock:
            self._watches[command.watch_id] = published
        return self.watch_out(command.watch_id, published, None)

    def _capture_feature(self, conn: Any, record_id: str) -> str:
        def nowhere(_checkpoint: str) -> None:
            return None

        try:
            record = capture_detail(conn, Kind.FACE, record_id, nowhere)
        except NotFound:
            raise Invalid("capture", f"no face capture {record_id!r}") from None
        feature = record.get("feature")
        if not isinstance(feature, str):
            raise Invalid("capture", f"face capture {record_id!r} has no readable feature")
        return feature

    def remove_watch(self, watch_id: str) -> dict[str, Any]:
        with self._lock:
            current = self._watches.get(watch_id)
        if current is None:
            raise NotFound("watch", watch_id)
        self._publish(self.topics.control_watchlist, watch_id, None)
        with self._lock:
            self._watches.pop(watch_id, None)
        return self.watch_out(watch_id, current, None)

    def get_watch(self, watch_id: str) -> dict[str, Any]:
        with self._lock:
            value = self._watches.get(watch_id)
        if value is None:
            raise NotFound("watch", watch_id)
        return value

    def watches(self, conn: happybase.Connection | None, limit: int, after: str | None,
                kind: str | None = None) -> tuple[list[dict[str, Any]], str | None]:
        """A page of watches in id order after ``after``, each with its hit count and last hit time."""
        with self._lock:
            chosen = sorted((i, v) for i, v in self._watches.items()
                            if (after is None or i > after) and (kind is None or v.get("kind") == kind))
        page = chosen[:limit]
        following = page[-1][0] if len(chosen) > limit else None
        return [self.watch_out(i, v, conn) for i, v in page], following

    def watch_out(self, watch_id: str, value: Mapping[str, Any], conn: happybase.Connection | None) -> dict[str, Any]:
        hits, last = hit_count(conn, watch_id) if conn is not None else (0, None)
        with self._lock:
            reply = self._reply("watch", watch_id)
        if "rejected" in value and reply["status"] == "pending":  # the service's reply says the same, once read
            reply = {"status": "rejected", "status_reason": value["rejected"], "status_time": None}
        return {"watch_id": watch_id, "kind": value.get("kind"), "plate": value.get("plate"),
                "threshold": value.get("threshold"), "capture": value.get("capture"),
                "checkpoints": value.get("checkpoints") or [], "districts": value.get("districts") or [],
                "expires_at": value.get("expires_at"), "reason": value.get("reason") or "",
                "requested_by": value.get("requested_by") or "", "requested_at": value.get("requested_at"),
                "hits": hits, "hits_capped": hits >= COUNT_CAP, "last_hit": last, **reply}

    # -- statistics -------------------------------------------------------------------------------
    def add_stat(self, body: Mapping[str, Any], username: str,
                 lanes: Callable[[], Mapping[str, int]] | None = None) -> dict[str, Any]:
        """Validate and publish a new statistic. ``lanes`` gives each checkpoint's lane count (the deployment map),
        asked only when the filter names a checkpoint or a lane: one that does not exist is a 422 naming
        ``filter.checkpoint_id`` or ``filter.lane`` here, before anything is published, rather than a statistic
        that counts nothing (the service, judging by its own copy of the map, would reject it too)."""
        value = {**{k: v for k, v in body.items() if v is not None}, "stat_id": f"stat-{uuid.uuid4().hex[:16]}",
                 "requested_by": username, "requested_at": now_iso()}
        try:
            command: StatCommand = stat_from_json(value)   # the shape first: a bad one is 422 even without a map
            if lanes is not None and PLACE_FIELDS & dict(command.filter).keys():
                command = stat_from_json(value, lanes=lanes())
        except CommandError as exc:
            raise _invalid(exc) from None
        published = command.to_json()
        self._publish(self.topics.control_stats, command.stat_id, published)
        with self._lock:
            self._stats[command.stat_id] = published
        return self._stat_out(command.stat_id, published)

    def remove_stat(self, stat_id: str) -> dict[str, Any]:
        with self._lock:
            current = self._stats.get(stat_id)
        if current is None:
            raise NotFound("statistic", stat_id)
        self._publish(self.topics.control_stats, stat_id, None)
        with self._lock:
            self._stats.pop(stat_id, None)
            self._results.pop(stat_id, None)
        return self._stat_out(stat_id, current)

    def stats(self) -> list[dict[str, Any]]:
        with self._lock:
            chosen = sorted(self._stats.items(), key=lambda item: str(item[1].get("requested_at")), reverse=True)
        return [self._stat_out(i, v) for i, v in chosen]

    def _stat_out(self, stat_id: str, value: Mapping[str, Any]) -> dict[str, Any]:
        with self._lock:
            reply = self._reply("stat", stat_id)
        return {"stat_id": stat_id, "measure": value.get("measure"), "group_by": value.get("group_by"),
                "window_s": value.get("window_s"), "filter": value.get("filter") or {},
                "requested_by": value.get("requested_by") or "", "requested_at": value.get("requested_at"), **reply}

    def stat(self, stat_id: str) -> dict[str, Any]:
        with self._lock:
            value = self._stats.get(stat_id)
        if value is None:
            raise NotFound("statistic", stat_id)
        return self._stat_out(stat_id, value)

    def results(self, stat_id: str) -> list[dict[str, Any]]:
        """The statistic's latest value per window and group, oldest window first; each with the ``checkpoint_id``
        and ``lane`` its group names when it is a lane (else null), so a page need not parse the group key."""
        with self._lock:
            if stat_id not in self._stats:
                raise NotFound("statistic", stat_id)
            windows = list(self._results.get(stat_id, {}).values())
        out = []
        for result in sorted(windows, key=lambda r: (str(r.get("window_start")), str(r.get("group")))):
            place = parse_lane_group(str(result.get("group")))
            checkpoint_id, lane = place if place is not None else (None, None)
            out.append({**result, "checkpoint_id": checkpoint_id, "lane": lane})
        return out

    def lane_counts(self, stat_id: str, store: MapStore) -> dict[str, int] | None:
        """For a statistic grouped by lane, each checkpoint's lane count on the map (the one it is filtered to,
        else every checkpoint), so the page can draw a lane that had no capture in a window; None for other
        groupings, and empty when the map cannot be read (the page then draws the lanes it has results for)."""
        value = self.stat(stat_id)
        if value.get("group_by") != "lane":
            return None
        try:
            checkpoints = store.current().checkpoints
        except MapError:
            return {}
        wanted = (value.get("filter") or {}).get("checkpoint_id")
        return {cp: c.lanes for cp, c in checkpoints.items() if wanted is None or cp == wanted}


PLACE_FIELDS = frozenset({"checkpoint_id", "lane"})
"""Filter fields checked against the deployment map before a statistic is started."""
MAP = "map"
"""The deployment map's name as a backend (503 when it cannot be read), as the devices API names it."""


def map_lanes(store: MapStore) -> dict[str, int]:
    """Each checkpoint's lane count on the map; 503 ``map`` when the map cannot be read (a statistic filtered to a
    checkpoint or lane cannot be judged then, and one that counts nothing must not start unnoticed)."""
    try:
        checkpoints = store.current().checkpoints
    except MapError as exc:
        raise BackendUnavailable(MAP, str(exc)) from None
    return {checkpoint_id: checkpoint.lanes for checkpoint_id, checkpoint in checkpoints.items()}


# -- hits (HBase) ---------------------------------------------------------------------------------
def _scan(conn: happybase.Connection, table: str, **kwargs: Any) -> Iterator[tuple[bytes, dict[bytes, bytes]]]:
    try:
        yield from conn.table(table).scan(**kwargs)
    except TException as exc:
        if not is_missing_table(exc):
            raise  # a table nobody created yet: the loader has loaded nothing


def hit_count(conn: happybase.Connection, watch_id: str) -> tuple[int, str | None]:
    """How many hits a watch has (up to COUNT_CAP) and the newest one's capture time: one key-only scan."""
    keys = [key for key, _cells in _scan(conn, layout.BY_WATCH_TABLE, row_prefix=layout.watch_prefix(watch_id),
                                         filter=layout.COUNT_FILTER, limit=COUNT_CAP, batch_size=1000)]
    if not keys:
        return 0, None
    newest = datetime.fromtimestamp(layout.capture_ms_of(keys[0]) / 1000, CITY_TZ)
    return len(keys), format_time(newest)


def watch_hits(conn: happybase.Connection, watch_id: str, limit: int,
               cursor: str | None) -> tuple[list[dict[str, Any]], str | None]:
    """A watch's hits, newest first, ``limit`` per page (the cursor: the last row key, opaque)."""
    prefix = layout.watch_prefix(watch_id)
    start = prefix
    if cursor is not None:
        try:
            key = decode_cursor(cursor)
        except ValueError:
            raise Invalid("cursor", "not a cursor this API returned") from None
        if not key.startswith(prefix):
            raise Invalid("cursor", "this cursor belongs to another watch")
        start = key + b"\0"
    stop = prefix[:-1] + bytes([prefix[-1] + 1])
    rows = list(_scan(conn, layout.BY_WATCH_TABLE, row_start=start, row_stop=stop, limit=limit + 1,
                      batch_size=limit + 1))
    following = encode_cursor(rows[limit - 1][0]) if len(rows) > limit else None
    return [layout.read_hit(cells) for _key, cells in rows[:limit]], following


def recent_hits(conn: happybase.Connection, limit: int) -> list[dict[str, Any]]:
    """The city's newest hits (cloned plates included): each bucket's newest, merged."""
    scans = [_scan(conn, layout.BY_TIME_TABLE, row_prefix=p, limit=limit, batch_size=limit)
             for p in layout.bucket_prefixes()]
    merged = heapq.merge(*scans, key=lambda row: row[0].split(b"|", 1)[1])
    return [layout.read_hit(cells) for _key, cells in itertools.islice(merged, limit)]


def trajectory(hits: list[dict[str, Any]], locate: Locate) -> list[dict[str, Any]]:
    """The hits as a path, oldest first, each with its checkpoint's location (from the hit, else the map)."""
    points = []
    for hit in sorted(hits, key=lambda h: str(h.get("capture_time"))):
        location = hit.get("location") or locate(str(hit.get("checkpoint_id")))
        points.append({"hit_id": hit.get("hit_id"), "record_id": hit.get("record_id"),
                       "checkpoint_id": hit.get("checkpoint_id"), "capture_time": hit.get("capture_time"),
                       "location": location})
    return points
