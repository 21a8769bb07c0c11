"""`bus delete-records`: delete records below given offsets, like kafka-delete-records.sh (DeleteRecordsCommand).

The `--offset-json-file` holds `{"partitions": [{"topic": "t", "partition": 0, "offset": 5}], "version": 1}`
(offset -1: up to the high watermark). Each partition's log start offset moves up to its offset, and the
tool prints Kafka's lines: `partition: t-0	low_watermark: 5`, or `partition: t-0	error: ...` for a partition
the broker refused (an unknown partition, an offset beyond the high watermark). Unlike Kafka, which exits 0
whatever happened, a refused partition makes the command exit 1, so a script can tell that records it meant
to delete are still there. A file that is missing, not JSON or not of this shape exits 1 with one line.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from bus.tools._common import ToolError, add_connection_args, admin_client, run_guarded

if TYPE_CHECKING:
    from bus.client.admin import AdminClient, AdminError, TopicPartition


def add_parser(sub: argparse._SubParsersAction, name: str) -> None:
    p = sub.add_parser(name, help="Delete records below given offsets (kafka-delete-records).",
                       description="This tool helps to delete records of the given partitions down to the "
                                   "specified offset.")
    add_connection_args(p, config_help="A property file containing configs to be passed to Admin Client.")
    p.add_argument("--offset-json-file", required=True, metavar="FILE",
                   help='REQUIRED: The JSON file with offset per partition. The format to use is:\n'
                        '{"partitions":\n  [{"topic": "foo", "partition": 1, "offset": 1}],\n "version":1\n}')
    p.set_defaults(run=run, parser=p)


def parse_offsets(text: str) -> dict[TopicPartition, int]:
    """The file's partitions and offsets, with DeleteRecordsCommand's checks and wording."""

    try:
        data = json.loads(text)
    except ValueError:
        raise ToolError("The input string is not a valid JSON") from None
    if not isinstance(data, dict):
        raise ToolError("The input string is not a valid JSON object")
    version = data.get("version", 1)
    if version != 1:
        raise ToolError(f"Not supported version field value {version}")
    partitions = data.get("partitions")
    if partitions is None:
        raise ToolError("Missing partitions field")
    if not isinstance(partitions, list):
        raise ToolError("The partitions field must be a list")
    out: dict[TopicPartition, int] = {}
    duplicates: list[str] = []
    for entry in partitions:
        tp, offset = _entry(entry)
        if tp in out:
            duplicates.append(str(tp))
        out[tp] = offset
    if duplicates:
        raise ToolError(f"Offset json file contains duplicate topic partitions: {','.join(duplicates)}")
    return out


def _entry(entry: Any) -> tuple[TopicPartition, int]:
    from bus.client.admin import TopicPartition

    if not isinstance(entry, dict):
        raise ToolError(f"Invalid partition entry {json.dumps(entry)}: expected an object with topic, partition "
                        "and offset")
    for key, kind in (("topic", str), ("partition", int), ("offset", int)):
        value = entry.get(key)
        if value is None:
            raise ToolError(f"Missing {key} field in partition entry {json.dumps(entry)}")
        if not isinstance(value, kind) or isinstance(value, bool):
            raise ToolError(f"Invalid {key} field in partition entry {json.dumps(entry)}")
    return TopicPartition(entry["topic"], entry["partition"]), entry["offset"]


def run(args: argparse.Namespace) -> int:
    return run_guarded("delete-records", lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    try:
        with open(args.offset_json_file, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ToolError(f"Cannot read --offset-json-file {args.offset_json_file}: "
                        f"{getattr(exc, 'strerror', None) or exc}") from None
    wanted = parse_offsets(text)
    with admin_client(args) as admin:
        print("Executing records delete operation")
        results = delete_each(admin, wanted)
    print("Records delete operation completed:")
    for tp, result in results.items():
        if isinstance(result, int):
            print(f"partition: {tp}\tlow_watermark: {result}")
        else:
            print(f"partition: {tp}\terror: {error_text(tp, result)}")
    return 1 if any(not isinstance(r, int) for r in results.values()) else 0


def error_text(tp: TopicPartition, error: AdminError) -> str:
    """The error as `message (NAME)`, with Kafka's default message where the client only named the error."""
    from bus.client.admin import AdminError

    return str(AdminError(error.code)) if error.message == f"{tp}: {error.name}" else str(error)


def delete_each(admin: AdminClient, wanted: dict[TopicPartition, int]) -> dict[TopicPartition, int | AdminError]:
    """Each partition's new low watermark or its error: one call for all, and when it fails, one per partition
    (the admin call raises its first failure), so that every partition gets its own answer as in Kafka."""
    from bus.client.admin import AdminError

    try:
        return dict(admin.delete_records(wanted))
    except AdminError as exc:
        if len(wanted) == 1:
            return dict.fromkeys(wanted, exc)
    results: dict[TopicPartition, int | AdminError] = {}
    for tp, offset in wanted.items():
        try:
            results[tp] = admin.delete_records({tp: offset})[tp]
        except AdminError as exc:
            results[tp] = exc
    return results
