"""Who may do what on the bus: each service's principal with the topics, groups and operations it needs, and no more.

The table is the one place the ACLs of a secured solution come from (`python -m deploy.acls` shows and applies it).
Topics are named by their :class:`~contracts.topics.Topics` field, so a deployment that renames a topic keeps its
ACLs. Operations are Kafka's (``kafka-acls --operation``): READ on a topic lets a consumer fetch it, and READ on its
group lets it join and commit; WRITE lets a producer produce (and, as in Kafka since 2.8, use an idempotent producer);
CREATE on a topic lets a service create it at start-up when it is missing; DESCRIBE is implied by READ and WRITE
(as in Kafka, not by CREATE: CREATE alone does not show a client the topic).
``admin`` is a super user of the brokers (``super.users``) and needs no row; the brokers themselves log in as
``broker``, also a super user.

What is absent matters as much: the simulator cannot read captures back, the console can neither delete topics nor
alter configs (its admin page says so), nothing but the monitor and the surveillance service writes ``alerts`` (the
service's watch hits and cloned plates are alerts too), only the console writes commands and the audit trail, and no
service may delete the ``audit`` topic or any record of it.

The same table is applied at both sites (`make up` applies it to the DR site's bus too, whose principals have
passwords of their own), each in its :class:`Role`: a grant marked with a role exists only at the site in that role,
and the roles follow the active-site record (`contracts/active_site.py`; `make up` applies them as it says, a
switchover swaps them). The mirror reads at the active site and writes at the standby one, the capture devices write
at the active site only (the fence of a standby site), and the DR site's loaders work at the DR site only, in either
role. The DR site's own jobs publish their stats
and dead letters to ``dr.``-prefixed copies (:data:`~contracts.topics.DR_PREFIX`), since the mirror must be the only
writer of a mirrored topic; ``dr-loaders`` may write those copies and never the mirrored topics themselves.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum

from .bus_client import PRINCIPALS
from .topics import SITE_ALIASES, Topics, site_local

ADMIN = "admin"
"""The operator's principal: a super user, used by `make up` to apply this table and by Kafka tools."""


class Op(StrEnum):
    """Kafka's ACL operations the table uses (their names as `kafka-acls` and the admin API spell them)."""

    READ = "READ"
    WRITE = "WRITE"
    CREATE = "CREATE"
    DESCRIBE = "DESCRIBE"
    DESCRIBE_CONFIGS = "DESCRIBE_CONFIGS"
    ALTER = "ALTER"
    ALTER_CONFIGS = "ALTER_CONFIGS"


class Role(StrEnum):
    """A site's part: ``active`` runs the business (the primary, until a switchover), ``standby`` receives the mirror
    (the DR site)."""

    ACTIVE = "active"
    STANDBY = "standby"


class Resource(StrEnum):
    TOPIC = "TOPIC"
    GROUP = "GROUP"
    CLUSTER = "CLUSTER"


@dataclass(frozen=True)
class Grant:
    """Operations on one resource: a topic by its ``Topics`` field name (``topics("vehicle")``, with ``local`` the
    site's own copy of it: ``dr.<topic>`` at the DR site, ``primary.<topic>`` at the primary), every topic (``"*"``),
    every data topic, a topic name prefix or a literal topic name (``literal``: a name no ``Topics`` field holds, such
    as MM2's checkpoints topic), a group by its literal id or id prefix, or the cluster; at the site in ``role`` only,
    or (None) in either role; at the named ``site`` only (``primary`` or ``dr``, whatever its role), or (None) at
    both."""

    resource: Resource
    name: str
    operations: tuple[Op, ...]
    prefixed: bool = False
    literal: bool = False
    local: bool = False
    role: Role | None = None
    site: str | None = None


@dataclass(frozen=True)
class Binding:
    """One ACL as the brokers hold it: ALLOW ``operation`` on a resource to ``User:<principal>`` from any host."""

    principal: str
    resource: Resource
    name: str
    pattern: str  # LITERAL or PREFIXED
    operation: Op

    @property
    def user(self) -> str:
        return f"User:{self.principal}"

    def line(self) -> str:
        """How `python -m deploy.acls --show` prints it (one binding per line)."""
        return (f"{self.user:<22} ALLOW {self.operation.value:<16} {self.resource.value:<8} {self.pattern:<8} "
                f"{self.name}")


def topics(*fields: str, ops: tuple[Op, ...]) -> list[Grant]:
    return [Grant(Resource.TOPIC, field, ops) for field in fields]


def dr_topics(*fields: str, ops: tuple[Op, ...]) -> list[Grant]:
    """The DR site's own copies (``dr.<topic>``) of the topics named by these fields."""
    return [Grant(Resource.TOPIC, field, ops, local=True, site="dr") for field in fields]


def local_topics(*fields: str, ops: tuple[Op, ...]) -> list[Grant]:
    """Each site's own copies (``<site>.<topic>``, :func:`~contracts.topics.site_local`) of these fields' topics."""
    return [Grant(Resource.TOPIC, field, ops, local=True) for field in fields]


def group(name: str, *, prefixed: bool = False, ops: tuple[Op, ...] = (Op.READ,)) -> Grant:
    return Grant(Resource.GROUP, name, ops, prefixed)


def cluster(*ops: Op) -> Grant:
    return Grant(Resource.CLUSTER, "kafka-cluster", ops)


CONSUME = (Op.READ,)
PRODUCE = (Op.WRITE,)
CREATE_AND_PRODUCE = (Op.CREATE, Op.WRITE)
ALL_TOPICS = "*"
DATA_TOPICS = "@data"
"""Every data topic of :meth:`Topics.data` (what the mirror copies)."""
CHECKPOINT_TOPICS = tuple(f"{alias}.checkpoints.internal" for alias in SITE_ALIASES)
"""MM2's checkpoints topic on the target of each mirror direction (``<source alias>.checkpoints.internal``)."""

MATRIX: dict[str, list[Grant]] = {
    "simulator": [  # the capture devices write at the active site only: the standby site's copies have one writer,
        # the mirror, and a site a switchover left (or the old primary coming back) is fenced from the devices
        *(dataclasses.replace(grant, role=Role.ACTIVE)
          for grant in topics("vehicle", "face", "heartbeat", ops=CREATE_AND_PRODUCE)),
    ],
    "capture-ingest": [
        *topics("vehicle", "face", ops=CONSUME),
        *topics("ingest_stats", "deadletter", ops=CREATE_AND_PRODUCE),
        # standing by, it loads what the mirror brings and publishes to its site's own copies (primary.ingest.stats)
        *local_topics("ingest_stats", "deadletter", ops=CREATE_AND_PRODUCE),
        group("spark-", prefixed=True),
    ],
    "video-ingest": [  # the streaming job reads commands and loads status and results; its batch jobs publish
        *topics("video_commands", ops=(Op.CREATE, Op.READ)),
        *topics("video_status", "video_results", ops=(Op.CREATE, Op.WRITE, Op.READ)),
        group("spark-", prefixed=True),
    ],
    "cameras": [],  # the cameras write footage to the object store only; they have no business on the bus
    "surveillance": [  # it creates every topic it touches when missing, so that it can start before the others
        *topics("vehicle", "face", "control_watchlist", "control_stats", ops=(Op.CREATE, Op.READ)),
        *topics("plate_sightings", "stat_events", ops=(Op.CREATE, Op.WRITE, Op.READ)),
        *topics("surveillance_hits", ops=(Op.CREATE, Op.WRITE, Op.READ)),  # re-read at start: the trajectories
        *topics("surveillance_stats", "surveillance_replies", "alerts", ops=CREATE_AND_PRODUCE),
        group("surveillance-", prefixed=True),
    ],
    "hit-loader": [
        *topics("surveillance_hits", ops=CONSUME),
        group("surveillance-loader"),
    ],
    "monitor": [
        *topics("heartbeat", "ingest_stats", "deadletter", ops=(Op.CREATE, Op.READ)),
        # its image sampler reads the captures (group <group_id>-images, under the group prefix below); it never
        # creates them: the simulator does, and a sampler that starts first waits for them
        *topics("vehicle", "face", ops=CONSUME),
        *topics("alerts", ops=CREATE_AND_PRODUCE),
        # at the DR site it judges the DR site's own ingest (its stats and dead letters, dr.-prefixed): what it
        # reads there once the site is promoted, created at its start when missing
        *dr_topics("ingest_stats", "deadletter", ops=(Op.CREATE, Op.READ)),
        Grant(Resource.TOPIC, "monitoring.", (Op.CREATE, Op.READ), prefixed=True),  # its lock, <group_id>.lock
        group("monitoring", prefixed=True, ops=(Op.READ, Op.DESCRIBE)),
    ],
    "console": [
        Grant(Resource.TOPIC, ALL_TOPICS, (Op.DESCRIBE, Op.DESCRIBE_CONFIGS)),
        # READ on "face" (with DESCRIBE above) is also what the face search's follower needs: it assigns the
        # partitions itself (offsets_for_times, no group join, no commits), so it asks for no group rights
        *topics("vehicle", "face", "heartbeat", "ingest_stats", "deadletter", "video_status", "video_results",
                "surveillance_hits", "surveillance_stats", "surveillance_replies", "alerts", "audit",
                "control_watchlist", "control_stats", "video_commands", "console_accounts", ops=CONSUME),
        # commands, the audit trail and the accounts are written at the active site only: there a console acts; a
        # standing-by one is read-only (web/site.py), and the standby site's copies have one writer, the mirror
        *(dataclasses.replace(grant, role=Role.ACTIVE)
          for grant in topics("control_watchlist", "control_stats", "video_commands", "audit", "console_accounts",
                              ops=CREATE_AND_PRODUCE)),
        # ... and a standing-by console audits its reads to its site's own copy (<site>.audit), in either role: a
        # switchover stands it down before the ACLs change
        *local_topics("audit", ops=(Op.CREATE, Op.WRITE, Op.READ)),
        # the DR site's console shows the DR site's own ingest (its stats and dead letters, dr.-prefixed)
        *dr_topics("ingest_stats", "deadletter", ops=CONSUME),
        *(Grant(Resource.TOPIC, name, CONSUME, literal=True, role=Role.STANDBY)  # the DR page reads them
          for name in CHECKPOINT_TOPICS),
        group("console-", prefixed=True),
        group("audit-loader", prefixed=True),  # audit-loader at the primary, audit-loader-dr at the DR site
        Grant(Resource.GROUP, "*", (Op.DESCRIBE,)),
        cluster(Op.DESCRIBE, Op.CREATE),
    ],
    "mirror": [
        # at the active site, the source: what it copies, with their configs; its offset syncs; every group's offsets
        Grant(Resource.TOPIC, DATA_TOPICS, (Op.READ, Op.DESCRIBE_CONFIGS), role=Role.ACTIVE),
        Grant(Resource.TOPIC, "mm2-offset-syncs.", (Op.CREATE, Op.WRITE, Op.READ), prefixed=True, role=Role.ACTIVE),
        Grant(Resource.GROUP, "*", (Op.DESCRIBE,), role=Role.ACTIVE),
        # at the standby site, the target: the copies (created, grown, their configs kept in line), its checkpoints,
        # the groups' translated offsets
        Grant(Resource.TOPIC, DATA_TOPICS, (Op.CREATE, Op.WRITE, Op.ALTER, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS),
              role=Role.STANDBY),
        *(Grant(Resource.TOPIC, name, (Op.CREATE, Op.WRITE, Op.READ), literal=True, role=Role.STANDBY)
          for name in CHECKPOINT_TOPICS),
        Grant(Resource.GROUP, "*", (Op.DESCRIBE, Op.READ), role=Role.STANDBY),
    ],
    "dr-loaders": [  # at the DR site, in either role (they go on loading after a switchover): the ingest job, the
        # hit loader and the video loader on mirrored data, and the image copier (dr_mirror/images.py: reads the
        # mirrored captures in its own group, writes no topic)
        *(dataclasses.replace(grant, site="dr") for grant in (
            *topics("vehicle", "face", "surveillance_hits", "video_status", "video_results", ops=CONSUME),
            *dr_topics("ingest_stats", "deadletter", ops=CREATE_AND_PRODUCE),
            group("spark-", prefixed=True),
            group("surveillance-loader"),
            group("dr-images"))),
    ],
}
"""Each service principal's grants (``admin`` is a super user and has none)."""

DEVICES = ("simulator",)
"""The capture devices' principals: fenced from a site a switchover is leaving while the mirror drains it."""


def placed(role: Role, site: str | None) -> str:
    """The site a table in ``role`` is for when none is named: where `make up` starts it (the primary active)."""
    return site or ("primary" if role is Role.ACTIVE else "dr")


def bindings(principal: str, names: Topics, role: Role = Role.ACTIVE, site: str | None = None) -> Iterator[Binding]:
    """``principal``'s ACLs at ``site`` (default :func:`placed`) in ``role``, with the topic names of ``names``."""
    for grant in MATRIX[principal]:
        if grant.role not in (None, role) or grant.site not in (None, placed(role, site)):
            continue
        resolved: tuple[str, ...]
        if grant.resource is Resource.TOPIC and grant.name == DATA_TOPICS:
            resolved = names.data()
        elif grant.resource is Resource.TOPIC and grant.name != ALL_TOPICS and not (grant.prefixed or grant.literal):
            name = getattr(names, grant.name)
            resolved = (site_local(placed(role, site), name) if grant.local else name,)
        else:
            resolved = (grant.name,)
        pattern = "PREFIXED" if grant.prefixed else "LITERAL"
        for name in resolved:
            for operation in grant.operations:
                yield Binding(principal, grant.resource, name, pattern, operation)


def all_bindings(names: Topics, role: Role = Role.ACTIVE, site: str | None = None, *,
                 fenced: bool = False) -> list[Binding]:
    """The whole table at ``site`` in ``role``, principal by principal in :data:`~contracts.bus_client.PRINCIPALS`
    order; ``fenced``: without the :data:`DEVICES`' grants (a site a switchover is leaving)."""
    return [binding for principal in PRINCIPALS if principal in MATRIX and not (fenced and principal in DEVICES)
            for binding in bindings(principal, names, role, site)]


def role_of(site: str, active: str) -> Role:
    """A site's role when the active-site record names ``active``."""
    return Role.ACTIVE if site == active else Role.STANDBY
