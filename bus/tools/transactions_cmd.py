"""`bus transactions`: list, describe and abort transactions, like kafka-transactions.sh (TransactionsCommand).

`list` asks every broker for the transactional ids it coordinates; `describe --transactional-id X` asks the id's
coordinator for its state, timeout, start time and partitions; `describe-producers --topic T --partition P` asks
the partition's leader which producers it remembers and where their open transaction starts; `abort --topic T
--partition P --start-offset N` writes an ABORT marker for the open transaction that starts at offset N there
(or `--producer-id --producer-epoch --coordinator-epoch` for a known producer), which is how an operator ends a
hanging transaction whose coordinator will never finish it: the broker serves WriteTxnMarkers for it, so the
tool sends it as Java's `Admin.abortTransaction` does. Tables are Kafka's: its column headers, tab-separated
cells padded to the column's width, `None` for what is unknown.
"""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING

from bus.tools._common import ToolError, add_connection_args, admin_client, run_guarded

if TYPE_CHECKING:
    from bus.client.admin import AdminClient

ACTIONS = ("list", "describe", "describe-producers", "abort")


def add_parser(sub: argparse._SubParsersAction, name: str) -> None:
    p = sub.add_parser(name, help="List, describe and abort transactions (kafka-transactions).",
                       description="This tool is used to analyze the transactional state of producers in the "
                                   "cluster. It can be used to detect and recover from hanging transactions.")
    add_connection_args(p, config_help="Property file containing configs to be passed to admin clients")
    actions = p.add_subparsers(dest="action", metavar="{" + ",".join(ACTIONS) + "}", required=True)
    listing = actions.add_parser("list", help="List transactions")
    listing.add_argument("--duration-filter", type=int, default=-1, metavar="MS",
                         help="Duration (in millis) to filter by: only transactions running longer than this are "
                              "listed (default: all).")
    describe = actions.add_parser("describe", help="Describe the state of an active transactional-id.")
    describe.add_argument("--transactional-id", required=True, metavar="ID", help="Transactional id")
    producers = actions.add_parser("describe-producers", help="Describe the states of active producers for a "
                                                              "topic partition.")
    producers.add_argument("--broker-id", type=int, metavar="ID",
                           help="Optional broker id to describe the producer state on a specific replica")
    producers.add_argument("--topic", required=True, help="Topic name")
    producers.add_argument("--partition", type=int, required=True, help="Partition number")
    abort = actions.add_parser("abort", help="Abort a hanging transaction (requires administrative privileges)")
    abort.add_argument("--topic", required=True, help="Topic name")
    abort.add_argument("--partition", type=int, required=True, help="Partition number")
    abort.add_argument("--start-offset", type=int, metavar="OFFSET",
                       help="Start offset of the transaction to abort")
    abort.add_argument("--producer-id", type=int, metavar="ID", help="Producer id of the transaction to abort")
    abort.add_argument("--producer-epoch", type=int, metavar="EPOCH", help="Producer epoch of the transaction")
    abort.add_argument("--coordinator-epoch", type=int, metavar="EPOCH",
                       help="Coordinator epoch of the transaction")
    p.set_defaults(run=run, parser=p)


def table(headers: list[str], rows: list[list[str]]) -> str:
    """Kafka's ToolsUtils.prettyPrintTable: each cell padded to its column's width and followed by a tab (the last
    one too, so an empty last cell still splits into its column)."""
    widths = [max(len(row[i]) for row in (headers, *rows)) for i in range(len(headers))]
    return "\n".join("".join(cell.ljust(width) + "\t" for cell, width in zip(row, widths, strict=True))
                     for row in (headers, *rows))


def _optional(value: int | None) -> str:
    return "None" if value is None else str(value)


def run(args: argparse.Namespace) -> int:
    return run_guarded("transactions", lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    if args.action == "abort":
        _check_abort_args(args)
    with admin_client(args) as admin:
        if args.action == "list":
            listed = admin.list_transactions(min_duration_ms=args.duration_filter)
            print(table(["TransactionalId", "Coordinator", "ProducerId", "TransactionState"],
                        [[t.transactional_id, str(t.coordinator), str(t.producer_id), t.state] for t in listed]))
        elif args.action == "describe":
            _describe(admin, args.transactional_id)
        elif args.action == "describe-producers":
            _describe_producers(admin, args)
        else:
            _abort(admin, args)
    return 0


def _describe(admin: AdminClient, transactional_id: str) -> None:
    txn = admin.describe_transaction(transactional_id)
    duration = None if txn.start_time_ms is None else max(0, int(time.time() * 1000) - txn.start_time_ms)
    print(table(["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
                 "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs", "TopicPartitions"],
                [[str(txn.coordinator), transactional_id, str(txn.producer_id), str(txn.producer_epoch), txn.state,
                  str(txn.timeout_ms), _optional(txn.start_time_ms), _optional(duration),
                  ",".join(map(str, txn.partitions))]]))


def _describe_producers(admin: AdminClient, args: argparse.Namespace) -> None:
    from bus.client.admin import TopicPartition

    producers = admin.describe_producers(TopicPartition(args.topic, args.partition), args.broker_id)
    print(table(["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
                 "CurrentTransactionStartOffset"],
                [[str(p.producer_id), str(p.producer_epoch), _optional(p.coordinator_epoch), str(p.last_sequence),
                  str(p.last_timestamp), _optional(p.current_transaction_start_offset)] for p in producers]))


def _check_abort_args(args: argparse.Namespace) -> None:
    """Either --start-offset, or all of --producer-id, --producer-epoch and --coordinator-epoch (Kafka's rule)."""
    by_producer = (args.producer_id, args.producer_epoch, args.coordinator_epoch)
    if args.start_offset is not None:
        if any(v is not None for v in by_producer):
            raise ToolError("The --start-offset option cannot be used with --producer-id, --producer-epoch or "
                            "--coordinator-epoch")
    elif any(v is None for v in by_producer):
        raise ToolError("Either --start-offset, or all of --producer-id, --producer-epoch and --coordinator-epoch, "
                        "must be given to abort a transaction")


def _abort(admin: AdminClient, args: argparse.Namespace) -> None:
    from bus.client.admin import TopicPartition

    tp = TopicPartition(args.topic, args.partition)
    if args.start_offset is None:
        admin.abort_transaction(tp, args.producer_id, args.producer_epoch, args.coordinator_epoch)
        return
    candidates = [p for p in admin.describe_producers(tp)
                  if p.current_transaction_start_offset == args.start_offset]
    if not candidates:
        raise ToolError(f"Could not find any open transactions starting at offset {args.start_offset} on "
                        f"partition {tp}")
    if len(candidates) > 1:
        raise ToolError(f"Found multiple open transactions starting at offset {args.start_offset} on partition "
                        f"{tp}: {', '.join(str(p.producer_id) for p in candidates)}")
    producer = candidates[0]
    admin.abort_transaction(tp, producer.producer_id, producer.producer_epoch, producer.coordinator_epoch or 0)
