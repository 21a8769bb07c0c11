"""One drill: the two sites, the mirror, the load, the failure injected and what is measured (see the package
docstring for the scenarios)."""

from __future__ import annotations

import argparse
import collections
import signal
import time
from pathlib import Path
from typing import Any

from contracts import config as solution_config
from deploy.processes.mirror import MirrorProcess
from dr_mirror.drill.load import HOLD, Fleet, Loader, create_topics, end_total, record_ids, wait_until
from dr_mirror.drill.report import LagProbe, chart, mirror_lag
from dr_mirror.drill.sites import ImageSites, Site, start_site_mirror
from dr_mirror.drill.supervisor import Supervisor


class Drill:
    """The two sites, the mirror and the load of one drill, and the events on its clock."""

    def __init__(self, args: argparse.Namespace, work: Path) -> None:
        self.args, self.work = args, work
        self.config = solution_config.load(args.config)
        self.primary = Site("primary", work, ingest=args.ingest)
        self.dr = Site("dr", work, ingest=args.ingest, dr=True)
        sites = {"primary": self.primary.bootstrap, "dr": self.dr.bootstrap}
        self.images = ImageSites(work, self.dr.bootstrap) if getattr(args, "images", False) else None
        self.fleet = Fleet(sites, args.rate, args.failover_after, args.replay,
                           upload=self.images.upload if self.images is not None else None)
        self.loader = Loader(sites, self.fleet)
        self.mirror: MirrorProcess | None = None  # the one primary -> dr
        self.mirrors: list[MirrorProcess] = []  # every mirror started, for the teardown
        self.probes: list[LagProbe] = []
        self.events: dict[str, float] = {}
        self.supervisor = Supervisor(args.max_restarts,
                                     on_restart=lambda name, n: self.event(f"{name} restarted ({n})"))
        self.setup_s: float | None = None
        self.t0 = time.time()

    def event(self, name: str) -> float:
        self.events[name] = now = time.time()
        return now

    def start_mirror(self, source: Site, target: Site) -> MirrorProcess:
        name = f"{source.name}->{target.name}"
        mirror = start_site_mirror(f"mirror-{source.name}-{target.name}", self.work, source, target, self.config)
        self.mirrors.append(mirror)
        self.supervisor.watch(f"mirror {name}", mirror.exited, mirror.start)  # resumes at the target's log end
        again = " (resumed)" if any(p.name.startswith(name) for p in self.probes) else ""
        probe = LagProbe(mirror.metrics_port, f"{name}{again}")
        probe.start()
        self.probes.append(probe)
        return mirror

    def start_ingest(self, site: Site) -> None:
        """Start a site's ingest job under supervision: restarted from its checkpoint if it exits."""
        site.start_ingest(self.config)
        self.supervisor.watch(f"{site.name} ingest", site.ingest_exited, lambda: site.start_ingest(self.config))

    def setup(self) -> None:
        """Both sites and the mirror first, the load only once both are ready: devices that send while Spark
        still starts (minutes on a loaded machine) let the mirror fall behind by more than their replay window,
        and records would really be lost. Ready: each ingest job has finished a first micro-batch, the mirror
        answers on its metrics port."""
        began = time.time()
        self.supervisor.start()
        for site in (self.primary, self.dr):
            site.start_broker()
            site.start_hbase()
            create_topics(site.bootstrap)  # the DR ingest job subscribes before the mirror's first copy
        if self.images is not None:  # the object stores and the image copier on the DR site's capture topics
            self.images.start()
            copier = self.images.copier
            assert copier is not None
            self.supervisor.watch("dr images", copier.exited, copier.start)
        self.mirror = self.start_mirror(self.primary, self.dr)
        ingest = [site for site in (self.primary, self.dr) if self.args.ingest]
        for site in ingest:  # both at once: nothing flows yet, and a job that dies while starting is restarted
            self.start_ingest(site)
        wait_until(lambda: self._sites_ready(ingest), self.args.ready_timeout, "both sites ready")
        self.t0 = self.event("sites ready")
        self.setup_s = round(self.t0 - began, 1)
        self.fleet.start()
        self.loader.start()
        wait_until(lambda: bool(self.fleet.acked) and any(v for _, v in self.probes[0].samples), 120, "load mirrored")
        self.event("load steady")

    def _sites_ready(self, ingest: list[Site]) -> bool:
        """Every ingest job has run a batch and the mirror answers; RuntimeError once the supervisor gave up."""
        for site in ingest:
            if f"{site.name} ingest" in self.supervisor.summary()["gave_up_on"]:
                raise RuntimeError(f"the {site.name} ingest job exited {self.args.max_restarts + 1} times: "
                                   f"{site.ingest_errors()}; see {self.work}")
        assert self.mirror is not None
        return all(site.ingest_ready() for site in ingest) and mirror_lag(self.mirror.metrics_port) is not None

    def teardown(self) -> None:
        self.supervisor.stopping.set()  # first: what the teardown stops must stay stopped
        if self.supervisor.is_alive():
            self.supervisor.join(30)
        for thread in (self.fleet, self.loader, *self.probes):
            thread.stopping.set()
        for thread in (self.fleet, self.loader, *self.probes):
            if thread.is_alive():
                thread.join(30)
        for mirror in self.mirrors:
            mirror.stop()
        if self.images is not None:
            self.images.stop()
        self.primary.stop()
        self.dr.stop()

    def stop_load(self) -> None:
        self.fleet.stopping.set()
        self.fleet.join(60)
        self.loader.stopping.set()

    def hbase_loss(self, site: Site, expected: set[str]) -> dict[str, Any]:
        """Rows in a site's HBase against the records acknowledged, once its ingest has caught up."""
        if not self.args.ingest:
            return {}
        rows: collections.Counter[str] = collections.Counter()
        deadline = time.monotonic() + self.args.settle
        while time.monotonic() < deadline:
            rows = site.hbase_ids()
            if expected <= rows.keys():
                break
            time.sleep(2)
        return {f"{site.name}_hbase_rows": sum(rows.values()),
                f"missing_in_{site.name}_hbase": len(expected - rows.keys()),
                f"duplicate_rows_in_{site.name}_hbase": sum(rows.values()) - len(rows)}

    def steady_load(self) -> None:
        """The load before the failure; with ``--crash-dr-ingest`` the DR ingest job is killed -9 halfway through,
        an accident the supervisor has to repair (from its checkpoint, nothing lost) and the report counts."""
        if not (self.args.crash_dr_ingest and self.args.ingest and self.dr.job is not None):
            time.sleep(self.args.seconds)
            return
        time.sleep(self.args.seconds / 2)
        self.event("dr ingest crashed")
        self.dr.job.kill()
        time.sleep(self.args.seconds / 2)

    # -- scenarios ------------------------------------------------------------------------------

    def primary_loss(self) -> dict[str, Any]:
        self.supervisor.unwatch("mirror primary->dr")  # its source is about to go: the drill no longer needs it
        if self.args.mirror_behind > 0:  # a mirror that is behind when the room is lost: what the replay is for
            assert self.mirror is not None and self.mirror.proc is not None
            self.event("mirror frozen")
            self.mirror.proc.send_signal(signal.SIGSTOP)
            time.sleep(self.args.mirror_behind)
        failed = self.event("primary lost")
        self.supervisor.unwatch("primary ingest")  # killed on purpose, with its room
        self.primary.lose()
        if self.args.mirror_behind > 0:
            assert self.mirror is not None and self.mirror.proc is not None
            self.mirror.proc.send_signal(signal.SIGCONT)  # nothing more can come from a dead primary
        time.sleep(1.0)  # what the mirror had copied: nothing more can arrive from a dead primary
        mirrored = record_ids(self.dr.bootstrap)
        acked_primary = {r: t for r, (site, t) in list(self.fleet.acked.items()) if site == "primary"}
        missing = sorted(acked_primary[r] for r in acked_primary if r not in mirrored)
        wait_until(lambda: "dr" in self.fleet.first_ack and "dr" in self.loader.first_record,
              self.args.failover_after + 60, "devices and group on DR")
        self.event("devices on DR")
        rows_at = None
        if self.args.ingest:  # the first records sent only to DR: when does one of them have its row there?
            fresh = [(self.fleet.kind[r], r) for r, (site, _) in list(self.fleet.acked.items()) if site == "dr"
                     and r not in mirrored][:50]
            deadline = time.monotonic() + 120
            while rows_at is None and time.monotonic() < deadline:
                rows_at = time.time() if fresh and self.dr.hbase_has_any(fresh) else None
                time.sleep(0.25)
        return {
            "acknowledged_by_primary": len(acked_primary),
            "rpo_records": len(missing),
            "rpo_span_s": round(missing[-1] - missing[0], 3) if missing else 0.0,
            "rto_producers_s": round(self.fleet.first_ack["dr"] - failed, 3),
            "rto_consumers_s": round(self.loader.first_record["dr"] - failed, 3),
            "rto_rows_s": round(rows_at - failed, 3) if rows_at else None,
        }

    def after_primary_loss(self) -> dict[str, Any]:
        time.sleep(self.args.after)
        self.stop_load()
        final = record_ids(self.dr.bootstrap)
        acked = set(self.fleet.acked)
        return {"acknowledged_total": len(acked), "dr_records": sum(final.values()),
                "lost_in_dr_topics": len(acked - final.keys()),
                "duplicates_in_dr_topics": sum(n - 1 for n in final.values() if n > 1),
                "consumed_twice": sum(n - 1 for n in self.loader.seen.values() if n > 1),
                **self.hbase_loss(self.dr, acked)}

    def mirror_crash(self) -> dict[str, Any]:
        assert self.mirror is not None
        self.supervisor.unwatch("mirror primary->dr")  # the deliberate kill window
        self.event("mirror killed")
        self.mirror.kill()
        copier = self.images.copier if self.images is not None else None
        if copier is not None:  # the image copier crashes with it: it resumes from its committed offsets
            self.supervisor.unwatch("dr images")
            copier.kill()
        time.sleep(self.args.outage)
        behind = end_total(self.primary.bootstrap) - end_total(self.dr.bootstrap)  # the RPO at its worst
        self.mirror.start()
        self.supervisor.watch("mirror primary->dr", self.mirror.exited, self.mirror.start)
        if copier is not None:
            copier.start()
            self.supervisor.watch("dr images", copier.exited, copier.start)
        restart = self.event("mirror restarted")
        caught_up = None
        deadline = time.monotonic() + 120
        while caught_up is None and time.monotonic() < deadline:
            if end_total(self.dr.bootstrap) >= end_total(self.primary.bootstrap) - self.args.rate * 0.5:
                caught_up = time.time()
            time.sleep(0.2)
        time.sleep(self.args.after)
        self.stop_load()
        wait_until(lambda: end_total(self.dr.bootstrap) >= end_total(self.primary.bootstrap), 60, "mirror caught up")
        source, target = record_ids(self.primary.bootstrap), record_ids(self.dr.bootstrap)
        return {"outage_s": self.args.outage, "behind_at_restart_records": behind,
                "catch_up_s": round(caught_up - restart, 3) if caught_up else None,
                "primary_records": sum(source.values()), "dr_records": sum(target.values()),
                "missing_at_dr": sum((source - target).values()), "extra_at_dr": sum((target - source).values()),
                **self.image_loss(), **self.hbase_loss(self.dr, set(source))}

    def image_loss(self) -> dict[str, Any]:
        """With ``--images``: the images the DR site's records name that it lacks (next to the records missing),
        once the image copier has caught up (or ``--settle`` has passed)."""
        if self.images is None:
            return {}
        images = self.images
        deadline = time.monotonic() + self.args.settle
        while time.monotonic() < deadline and images.lag() != 0:
            time.sleep(0.5)
        return images.gaps()

    def failback(self) -> dict[str, Any]:
        report = self.primary_loss()
        time.sleep(self.args.outage)
        assert self.mirror is not None
        self.mirror.stop()  # the mirror's source is gone; a new one runs once the primary is back
        back = self.event("primary back (empty log)")
        self.primary.start_broker(fresh=True)
        self.primary.start_hbase()
        reverse = self.start_mirror(self.dr, self.primary)
        wait_until(lambda: end_total(self.primary.bootstrap) >= end_total(self.dr.bootstrap) - self.args.rate * 0.5,
              180, "copied back to the primary")
        copied = time.time()
        hold = self.event("switch back")
        self.fleet.switch(HOLD)
        wait_until(lambda: end_total(self.primary.bootstrap) >= end_total(self.dr.bootstrap), 60, "DR drained")
        self.supervisor.unwatch("mirror dr->primary")
        reverse.stop()  # the primary's topics are DR's, offset for offset; from here the primary writes them
        if self.args.ingest:
            self.start_ingest(self.primary)  # a new checkpoint: the old one's offsets were of the lost log
        self.fleet.switch("primary")
        self.mirror = self.start_mirror(self.primary, self.dr)
        self.event("mirror primary->dr resumed")
        wait_until(lambda: "primary" in self.fleet.first_ack and "primary" in self.loader.first_record, 60,
              "devices and group back on the primary")
        outage = {r for r, (site, _) in list(self.fleet.acked.items()) if site == "dr"}
        report.update({"written_during_outage": len(outage), "copy_back_s": round(copied - back, 3),
                       "devices_held_s": round(self.fleet.first_ack["primary"] - hold, 3),
                       "group_back_s": round(self.loader.first_record["primary"] - hold, 3)})
        time.sleep(self.args.after)
        self.stop_load()
        wait_until(lambda: end_total(self.dr.bootstrap) >= end_total(self.primary.bootstrap), 60, "mirror caught up")
        on_primary, on_dr = record_ids(self.primary.bootstrap), record_ids(self.dr.bootstrap)
        acked = set(self.fleet.acked)
        report.update({"acknowledged_total": len(acked), "primary_records": sum(on_primary.values()),
                       "lost_in_primary_topics": len(acked - on_primary.keys()),
                       "outage_records_missing_on_primary": len(outage - on_primary.keys()),
                       "primary_equals_dr": on_primary == on_dr,
                       "duplicates_in_primary_topics": sum(n - 1 for n in on_primary.values() if n > 1),
                       **self.hbase_loss(self.primary, acked), **self.hbase_loss(self.dr, acked)})
        return report

    def run(self) -> dict[str, Any]:
        report: dict[str, Any] = {"scenario": self.args.scenario, "rate": self.args.rate, "load_s": self.args.seconds,
                                  "ingest": self.args.ingest}
        try:
            self.setup()
            self.steady_load()
            if self.args.scenario == "primary-loss":
                report.update(self.primary_loss())
                report.update(self.after_primary_loss())
            elif self.args.scenario == "mirror-crash":
                report.update(self.mirror_crash())
            else:
                report.update(self.failback())
        finally:
            self.teardown()
        report["setup_s"] = self.setup_s
        report.update(self.supervisor.summary())
        lags = [v for p in self.probes for _, v in p.samples if v is not None]
        report["max_mirror_lag_records"] = max(lags, default=None)
        if self.args.report:
            chart(self.args.report / "drill.png", f"DR drill: {self.args.scenario}", self.t0, self.probes,
                  self.fleet.acks, self.events)
        return report


