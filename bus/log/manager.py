"""All partition logs of a broker across its log directories (Kafka's LogManager).

A partition lives in `<log.dir>/<topic>-<partition>/`; a new one goes to the directory holding the fewest
partitions. Deleting renames the directory to `<name>.<uuid>-delete` before removing it, so start-up can
finish a deletion a crash interrupted. The manager also drives the periodic work: retention, flushing and
compaction (the last from a worker thread, hence the lock around the partition table).
"""

from __future__ import annotations

import logging
import re
import shutil
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from bus.log.cleaner import CleanStats, clean
from bus.log.config import LogConfig
from bus.log.log import Log, wall_clock_ms
from bus.protocol.topic_partition import TopicPartition

log = logging.getLogger(__name__)

_PARTITION_DIR = re.compile(r"(?P<topic>.+)-(?P<partition>0|[1-9][0-9]*)")
_DELETE_SUFFIX = "-delete"
# KRaft keeps its metadata log beside the partitions (metadata.log.dir defaults to the first log dir).
_METADATA_TOPIC = "__cluster_metadata"



class LogManager:
    def __init__(
        self, log_dirs: Sequence[Path], default_config: LogConfig, *, now_ms: Callable[[], int] = wall_clock_ms
    ) -> None:
        if not log_dirs:
            raise ValueError("at least one log directory is required")
        self.log_dirs = [Path(d) for d in log_dirs]
        self.default_config = default_config
        self._now_ms = now_ms
        self._lock = threading.Lock()
        self._logs: dict[TopicPartition, Log] = {}
        self._dir_of: dict[TopicPartition, Path] = {}
        for directory in self.log_dirs:
            directory.mkdir(parents=True, exist_ok=True)

    def load_all(self, configs_for: Callable[[str], LogConfig | None]) -> None:
        """Open every partition found in the log directories (start-up). `configs_for(topic)` gives its
        config; None leaves that topic's directories alone. Leftover `-delete` directories are removed."""
        for root in self.log_dirs:
            for entry in sorted(root.iterdir()):
                if not entry.is_dir():
                    continue
                if entry.name.endswith(_DELETE_SUFFIX):
                    log.info("removing %s, left over from an interrupted deletion", entry)
                    shutil.rmtree(entry, ignore_errors=True)
                    continue
                match = _PARTITION_DIR.fullmatch(entry.name)
                if match is None or match["topic"] == _METADATA_TOPIC:
                    continue
                tp = TopicPartition(match["topic"], int(match["partition"]))
                config = configs_for(tp[0])
                if config is None:
                    continue
                with self._lock:
                    if tp in self._logs:
                        raise RuntimeError(f"partition {tp[0]}-{tp[1]} is in both {self._dir_of[tp]} and {root}")
                    self._logs[tp] = Log(entry, config, now_ms=self._now_ms)
                    self._dir_of[tp] = root

    def get_or_create(self, topic: str, partition: int, config: LogConfig | None = None) -> Log:
        with self._lock:
            tp = TopicPartition(topic, partition)
            found = self._logs.get(tp)
            if found is not None:
                return found
            counts = {d: 0 for d in self.log_dirs}
            for directory in self._dir_of.values():
                counts[directory] += 1
            root = min(self.log_dirs, key=counts.__getitem__)
            created = Log(root / f"{topic}-{partition}", config or self.default_config, now_ms=self._now_ms)
            self._logs[tp] = created
            self._dir_of[tp] = root
            return created

    def get(self, tp: TopicPartition) -> Log | None:
        return self._logs.get(tp)

    def delete(self, topic: str, partition: int) -> Callable[[], None] | None:
        """Forget the partition and rename its directory for deletion; returns the removal of its files, for
        the caller to run off the event loop (see Log.detach), or None if there was no such log."""
        with self._lock:
            doomed = self._logs.pop(TopicPartition(topic, partition), None)
            self._dir_of.pop(TopicPartition(topic, partition), None)
        return None if doomed is None else doomed.detach()

    def all_logs(self) -> list[Log]:
        with self._lock:
            return list(self._logs.values())

    def enforce_retention(self) -> int:
        """Apply retention to every log; returns the number of segments deleted."""
        return sum(each.enforce_retention() for each in self.all_logs())

    def clean_compacted(self, now_ms: int | None = None) -> list[CleanStats]:
        """One cleaning pass over every compacted log that is dirty enough. A log that fails is logged and
        skipped so one bad partition does not stop compaction of the others."""
        now = self._now_ms() if now_ms is None else now_ms
        done = []
        for each in self.all_logs():
            if not each.config.compact:
                continue
            try:
                stats = clean(each, now)
            except Exception:
                log.exception("cleaning %s failed", each.directory)
                continue
            if stats is not None:
                done.append(stats)
        return done

    def flush_dirty(self, now_ms: int) -> None:
        """The periodic flusher, meant for a worker thread (logs do not hold their lock across fsyncs). A log
        that fails (its disk, or deleted meanwhile) is logged and skipped, so the others still get flushed."""
        for each in self.all_logs():
            try:
                each.flush_if_due(now_ms)
            except Exception:
                log.exception("flushing %s failed", each.directory)

    def close(self) -> None:
        with self._lock:
            logs = list(self._logs.values())
            self._logs.clear()
            self._dir_of.clear()
        for each in logs:
            each.close()
