"""`bus metadata-quorum`: the KRaft quorum's status, like kafka-metadata-quorum.sh.

`describe --status` prints MetadataQuorumCommand's summary (ClusterId, LeaderId, LeaderEpoch,
HighWatermark, MaxFollowerLag, MaxFollowerLagTimeMs, CurrentVoters, CurrentObservers); `describe
--replication` its table (NodeId, LogEndOffset, Lag, LastFetchTimestamp, LastCaughtUpTimestamp, Status;
`--human-readable` prints the timestamps as "N ms ago"). The voters print as ids (`[1,2,3]`), as Kafka's
tool did before DescribeQuorum v2 brought directory ids and endpoints (KIP-853), which we do not serve.
"""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING

from bus.tools._common import ToolError, add_connection_args, admin_client, run_guarded

if TYPE_CHECKING:
    from bus.client.admin import QuorumInfo, QuorumReplicaState


def add_parser(sub: argparse._SubParsersAction, name: str) -> None:
    p = sub.add_parser(name, help="Describe the KRaft metadata quorum (kafka-metadata-quorum).",
                       description="This tool describes kraft metadata quorum status.")
    add_connection_args(p, config_help="Property file containing configs to be passed to Admin Client.")
    actions = p.add_subparsers(dest="action", metavar="{describe}", required=True)
    describe = actions.add_parser("describe", help="Describe the metadata quorum info")
    describe.add_argument("--status", action="store_true", help="A short summary of the quorum status and the "
                          "other provides detailed information about the status of replication.")
    describe.add_argument("--replication", action="store_true", help="Detailed information about the status of "
                          "replication")
    describe.add_argument("--human-readable", action="store_true", help="Human-readable output")
    p.set_defaults(run=run, parser=p)


def run(args: argparse.Namespace) -> int:
    return run_guarded("metadata-quorum", lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    if args.status and args.replication:
        raise ToolError("Only one of --status or --replication should be specified with describe sub-command")
    if not args.status and not args.replication:
        raise ToolError("One of --status or --replication must be specified with describe sub-command")
    if args.human_readable and not args.replication:
        raise ToolError("The option --human-readable is only supported along with --replication")
    with admin_client(args) as admin:
        quorum = admin.describe_metadata_quorum()
        if args.status:
            print(status_text(admin.describe_cluster().cluster_id, quorum))
        else:
            print(replication_table(quorum, args.human_readable, int(time.time() * 1000)))
    return 0


def _leader(quorum: QuorumInfo) -> QuorumReplicaState:
    for voter in quorum.voters:
        if voter.replica_id == quorum.leader_id:
            return voter
    raise ToolError(f"The quorum's leader {quorum.leader_id} is not among its voters")


def status_text(cluster_id: str | None, quorum: QuorumInfo) -> str:
    leader = _leader(quorum)
    max_lag_follower = min(quorum.voters, key=lambda v: v.log_end_offset)  # the first of equals, as Java's
    lag_time = -1
    if max_lag_follower is leader:
        lag_time = 0
    elif leader.last_caught_up_timestamp is not None and max_lag_follower.last_caught_up_timestamp is not None:
        lag_time = leader.last_caught_up_timestamp - max_lag_follower.last_caught_up_timestamp
    return "\n".join((
        f"ClusterId:              {cluster_id}",
        f"LeaderId:               {quorum.leader_id}",
        f"LeaderEpoch:            {quorum.leader_epoch}",
        f"HighWatermark:          {quorum.high_watermark}",
        f"MaxFollowerLag:         {leader.log_end_offset - max_lag_follower.log_end_offset}",
        f"MaxFollowerLagTimeMs:   {lag_time}",
        f"CurrentVoters:          [{','.join(str(v.replica_id) for v in quorum.voters)}]",
        f"CurrentObservers:       [{','.join(str(o.replica_id) for o in quorum.observers)}]",
    ))


def replication_table(quorum: QuorumInfo, human_readable: bool, now_ms: int) -> str:
    leader = _leader(quorum)

    def timestamp(value: int | None) -> str:
        if value is None:
            return "-1"
        return f"{max(0, now_ms - value)} ms ago" if human_readable else str(value)

    groups = (([leader], "Leader"), ([v for v in quorum.voters if v is not leader], "Follower"),
              (quorum.observers, "Observer"))
    rows = [["NodeId", "LogEndOffset", "Lag", "LastFetchTimestamp", "LastCaughtUpTimestamp", "Status"]]
    rows += [[str(r.replica_id), str(r.log_end_offset), str(leader.log_end_offset - r.log_end_offset),
              timestamp(r.last_fetch_timestamp), timestamp(r.last_caught_up_timestamp), status]
             for replicas, status in groups for r in replicas]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("\t".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
                     for row in rows)
