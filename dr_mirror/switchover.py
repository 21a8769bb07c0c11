"""``python -m dr_mirror switchover --to dr|primary [--data-dir DATA] [--reason TEXT] [--force]``: move the running
solution's business to the other site (``--to primary`` is the failback), through the active-site record
(`contracts/active_site.py`) every service and device reads its site from.

A planned switchover (both sites' buses answer) loses nothing:

1. One at a time: it holds ``DATA/dr/switchover.lock``; a second one is told which process holds it and changes
   nothing.
2. The new site's bus must answer, and the mirror towards it must be no more than ``--max-lag`` records behind
   (it reports its lag on its ``/metrics``), unless ``--force``: the refusal says how many records and seconds of
   writes it would wait for.
3. The record says ``switching_to``: the services with ``[site]`` at both sites stand down (the primary's analytics
   process does not: docs/operations.md), the devices hold their captures, the mirror copies on. The site being left
   is fenced: its ACL table without the devices' grants
   (`contracts/bus_acls.py`), so a device that has not seen the record yet is refused, never half-written.
4. Drain: the site's end offsets stop moving and the mirror reports nothing waiting, twice a second apart; at
   ``--drain-timeout`` the switchover is undone (the fence lifted, the record as it was) and says so.
5. The new site's ACLs become the active role's; the mirror the other way (make up runs it standing by) is given a
   handover offset sync per partition (the new site's log end answering the old one's), so it resumes exactly where
   the switch happened; the old site's ACLs become the standby role's (the mirror's rights follow); the record names
   the new site, with the switchover's figures in ``last``: records lost, seconds drained, seconds to switch.

An unplanned one (the site being left does not answer: the primary room lost) is refused unless ``--force``, since
what the mirror had not copied is lost (its last lag is printed when its ``/metrics`` still answer); forced, the new
site's ACLs become active and the record names it. The old site stays fenced when it comes back: `make up` applies
each site's table in the role the record gives it.

Exit status: 0 switched (or already active there); 1 refused or undone, nothing changed; 2 bad arguments.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import fcntl
import os
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TextIO

from bus.client.admin import AdminClient, OffsetSpec
from contracts import active_site as site_record
from contracts import bus_client
from contracts import config as solution_config
from contracts.bus_acls import Role
from contracts.topics import Topics
from dr_mirror import lag, site_acls
from dr_mirror.settings import defaults_from, load
from dr_mirror.syncs import write_handover

SECTIONS = {"primary": bus_client.SECTION, "dr": bus_client.DR}
"""The solution config's section naming each site's bus."""
MIRRORS = {"primary": ("mm2.properties", "mirror_metrics_port", 9320),
           "dr": ("mm2-reverse.properties", "reverse_mirror_metrics_port", 9322)}
"""The mirror copying from each site, as make up runs it: its properties under ``DATA/dr``, its metrics port key."""
MAX_LAG = 100_000
DRAIN_TIMEOUT_S = 120.0
ANSWER_S = 10.0


class Refused(Exception):
    """The switchover cannot go on; nothing was changed (or what was changed has been undone)."""


def other(site: str) -> str:
    return "dr" if site == "primary" else "primary"


@contextlib.contextmanager
def exclusive(data_dir: Path) -> Iterator[None]:
    """``DATA/dr/switchover.lock`` held for the switchover, or Refused naming the process holding it."""
    path = data_dir / "dr" / "switchover.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+") as held:
        try:
            fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            held.seek(0)
            raise Refused(f"another switchover is under way (process {held.read().strip() or 'unknown'}); "
                          "nothing changed") from None
        held.truncate(0)
        held.write(str(os.getpid()))
        held.flush()
        try:
            yield
        finally:
            held.truncate(0)
            fcntl.flock(held, fcntl.LOCK_UN)


class Sites:
    """The two sites' buses as the super user ``admin`` reaches them, and their mirrors' lag."""

    def __init__(self, config: solution_config.Config, data_dir: Path) -> None:
        self.config = config
        self.data_dir = data_dir
        self.topics = Topics.from_config(config)
        self._admins: dict[str, AdminClient] = {}

    def settings(self, site: str) -> dict[str, str]:
        return {**bus_client.java(self.config, "admin", section=SECTIONS[site]),
                "default.api.timeout.ms": str(int(ANSWER_S * 1000))}

    def admin(self, site: str) -> AdminClient:
        """An admin client of ``site``'s bus that has answered, or Refused."""
        if site not in self._admins:
            try:
                admin = AdminClient(self.settings(site))
                admin.list_topics()
            except Exception as exc:
                raise Refused(f"the {site} site's bus does not answer ({exc}); nothing changed") from None
            self._admins[site] = admin
        return self._admins[site]

    def answers(self, site: str) -> bool:
        try:
            self.admin(site)
        except Refused:
            return False
        return True

    def ends(self, site: str) -> dict[tuple[str, int], int]:
        """The log end of every partition of the data topics (what the mirrors copy) at ``site``."""
        admin = self.admin(site)
        names = [t for t in self.topics.data() if t in set(admin.list_topics())]
        partitions = admin.partitions_for(names) if names else []
        found = admin.list_offsets({p: OffsetSpec.LATEST for p in partitions}) if partitions else {}
        return {(p.topic, p.partition): info.offset for p, info in found.items()}

    def mirror_lag(self, source: str) -> dict[str, Any] | None:
        """The RPO the mirror copying from ``source`` reports now (records, seconds), None when it does not answer."""
        _, key, default = MIRRORS[source]
        url = f"http://127.0.0.1:{self.config.get('dr', key, default)}/metrics"
        try:
            with urllib.request.urlopen(url, timeout=ANSWER_S) as response:
                return lag.rpo_now(lag.parse_lag(response.read().decode()))
        except (urllib.error.URLError, OSError, ValueError):
            return None

    def apply(self, site: str, role: Role, *, fenced: bool = False) -> None:
        site_acls.sync(self.admin(site), self.topics, role, site, fenced=fenced)

    def handover(self, source: str, pairs: Mapping[tuple[str, int], tuple[int, int]]) -> None:
        """The mirror copying from ``source`` told where each partition resumes (source offset, target offset)."""
        properties = self.data_dir / "dr" / MIRRORS[source][0]
        write_handover(load(properties, defaults_from(self.config)), pairs)

    def close(self) -> None:
        for admin in self._admins.values():
            admin.close()


def _lost(rpo: dict[str, Any] | None) -> str:
    if rpo is None:
        return "an unknown number of records (the mirror does not answer)"
    seconds = "" if rpo["seconds"] is None else f", {rpo['seconds']:,.1f} s of writes"
    return f"{rpo['records']:,} records{seconds}"


class Switchover:
    def __init__(self, sites: Sites, data_dir: Path, to: str, reason: str, force: bool, max_lag: int,
                 drain_timeout_s: float, say: Callable[[str], None]) -> None:
        self.sites, self.data_dir, self.to, self.source = sites, data_dir, to, other(to)
        self.reason, self.force, self.max_lag, self.drain_timeout_s, self.say = (
            reason, force, max_lag, drain_timeout_s, say)
        self.started = time.monotonic()
        self.drained_s = 0.0

    def run(self) -> site_record.ActiveSite:
        record = site_record.read(self.data_dir) or site_record.ensure(self.data_dir, "make up")
        if record.active == self.to and record.switching_to is None:
            self.say(f"already {record.line()}")
            return record
        self.sites.admin(self.to)  # Refused when the new site's bus does not answer
        if record.active == self.to:  # a switchover away from it was interrupted: lift the fence, stay there
            self.sites.apply(self.to, Role.ACTIVE)
            return self._record(record, last=None, reason=f"switchover to {self.source} undone: {self.reason}")
        rpo = self.sites.mirror_lag(self.source)
        if not self.sites.answers(self.source):
            return self._unplanned(record, rpo)
        if rpo is not None and rpo["records"] > self.max_lag and not self.force:
            raise Refused(f"the mirror {self.source} -> {self.to} is {_lost(rpo)} behind (more than --max-lag "
                          f"{self.max_lag:,}): the switchover would wait for them; --force to go on; nothing changed")
        return self._planned(record, rpo)

    def _planned(self, record: site_record.ActiveSite, rpo: dict[str, Any] | None) -> site_record.ActiveSite:
        self.say(f"switching {self.source} -> {self.to}: the mirror is {_lost(rpo)} behind")
        site_record.write(self.data_dir, site_record.ActiveSite(
            record.active, record.since, record.reason, self.to, record.last))
        try:
            self.sites.apply(self.source, Role.ACTIVE, fenced=True)
            self.say(f"{self.source}: the devices are fenced, the services stand down; draining the mirror")
            drained = self._drain()
        except BaseException:
            self._undo(record)
            raise
        # the new site's roles first: the handover is written as the mirror, with its rights at an active site
        self.sites.apply(self.to, Role.ACTIVE)
        pairs = {key: (drained[1][key], end) for key, end in drained[0].items() if key in drained[1]}
        self.sites.handover(self.to, pairs)
        self.sites.apply(self.source, Role.STANDBY)
        return self._record(record, reason=self.reason, last={
            "planned": True, "from": self.source, "records_lost": 0, "drained_s": round(self.drained_s, 3),
            "switch_s": round(time.monotonic() - self.started, 3)})

    def _drain(self) -> tuple[dict[tuple[str, int], int], dict[tuple[str, int], int]]:
        """The two sites' log ends once the source's stop moving and the mirror has nothing waiting, twice in a row."""
        deadline = time.monotonic() + self.drain_timeout_s
        began = time.monotonic()
        previous: dict[tuple[str, int], int] | None = None
        settled = 0
        while True:
            ends = self.sites.ends(self.source)
            rpo = self.sites.mirror_lag(self.source)
            quiet = ends == previous and rpo is not None and rpo["records"] == 0
            settled = settled + 1 if quiet else 0
            if settled >= 2:
                self.drained_s = time.monotonic() - began
                self.say(f"drained in {self.drained_s:.1f} s")
                return ends, self.sites.ends(self.to)
            if time.monotonic() > deadline:
                raise Refused(f"the mirror did not drain in {self.drain_timeout_s:.0f} s (it is {_lost(rpo)} "
                              f"behind): the switchover is undone, {self.source} stays active")
            previous = ends
            time.sleep(1.0)

    def _undo(self, record: site_record.ActiveSite) -> None:
        with contextlib.suppress(Exception):
            self.sites.apply(self.source, Role.ACTIVE)
        site_record.write(self.data_dir, record)

    def _unplanned(self, record: site_record.ActiveSite, rpo: dict[str, Any] | None) -> site_record.ActiveSite:
        if not self.force:
            raise Refused(f"the {self.source} site's bus does not answer: switching now loses what the mirror had "
                          f"not copied, {_lost(rpo)}; --force to switch anyway; nothing changed")
        self.say(f"the {self.source} site is lost: switching to {self.to}, losing {_lost(rpo)}")
        self.sites.apply(self.to, Role.ACTIVE)
        return self._record(record, reason=self.reason, last={
            "planned": False, "from": self.source, "records_lost": None if rpo is None else rpo["records"],
            "seconds_lost": None if rpo is None else rpo["seconds"],
            "switch_s": round(time.monotonic() - self.started, 3)})

    def _record(self, record: site_record.ActiveSite, *, reason: str,
                last: dict[str, Any] | None) -> site_record.ActiveSite:
        switched = site_record.ActiveSite(self.to, dt.datetime.now(dt.UTC), reason, None,
                                          last if last is not None else record.last)
        site_record.write(self.data_dir, switched)
        self.say(switched.line())
        return switched


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m dr_mirror switchover", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--to", required=True, choices=site_record.SITES, help="the site that runs the business next")
    p.add_argument("--data-dir", type=Path, default=Path("data"), help="make up's data directory (data)")
    p.add_argument("--reason", default="switchover", help="why, kept in the active-site record")
    p.add_argument("--force", action="store_true",
                   help="switch although the mirror is far behind or the site being left does not answer")
    p.add_argument("--max-lag", type=int, default=MAX_LAG,
                   help=f"records the mirror may be behind for a switchover without --force ({MAX_LAG:,})")
    p.add_argument("--drain-timeout", type=float, default=DRAIN_TIMEOUT_S,
                   help=f"seconds to wait for the mirror to drain before undoing ({DRAIN_TIMEOUT_S:.0f})")
    return p


def main(argv: list[str] | None = None, out: TextIO = sys.stdout) -> int:
    p = parser()
    args = p.parse_args(argv)
    config_path = args.data_dir / "solution.toml"
    if not config_path.is_file():
        p.error(f"{config_path} not found: is --data-dir a make up data directory?")
    if args.max_lag < 0 or args.drain_timeout <= 0:
        p.error("--max-lag must be at least 0 and --drain-timeout above 0")
    try:
        config = solution_config.load(config_path)
        site_record.read(args.data_dir)
    except (site_record.SiteRecordError, ValueError) as exc:
        print(f"dr_mirror switchover: {exc}", file=sys.stderr)
        return 2
    sites = Sites(config, args.data_dir)
    try:
        with exclusive(args.data_dir):
            Switchover(sites, args.data_dir, args.to, args.reason, args.force, args.max_lag, args.drain_timeout,
                       lambda line: print(line, file=out, flush=True)).run()
    except Refused as exc:
        print(f"dr_mirror switchover: {exc}", file=sys.stderr)
        return 1
    finally:
        sites.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
