"""`bus leader-election`: elect preferred or unclean leaders, like kafka-leader-election.sh.

Flags, checks and output follow Kafka's LeaderElectionCommand: `--bootstrap-server` and `--election-type
PREFERRED|UNCLEAN` are required, and exactly one of `--all-topic-partitions`, `--topic T --partition N` or
`--path-to-json-file F` (`{"partitions": [{"topic": "t", "partition": 0}, ...]}`) says which partitions;
`--admin.config` is a properties file for the admin client. It prints the partitions elected ("Successfully
completed leader election (PREFERRED) for partitions t-0, t-1"), those whose valid leader is already in place
("Valid replica already elected for partitions ...") and one line per failure, then exits 1 if any failed. As in
Kafka, the admin calls default to a 30 s deadline (15 s per request) unless the config file says otherwise.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from bus.protocol.topic_partition import TopicPartition
from bus.tools._common import ToolError, add_connection_args, load_client_config, run_guarded

if TYPE_CHECKING:
    from bus.client.admin import AdminError

ELECTION_TYPES = ("PREFERRED", "UNCLEAN")
DEFAULT_API_TIMEOUT_MS = 30_000  # LeaderElectionCommand's timeout; requests get half of it


def add_parser(sub: argparse._SubParsersAction, name: str) -> None:
    p = sub.add_parser(name, help="Elect preferred or unclean partition leaders (kafka-leader-election).",
                       description="This tool attempts to elect a new leader for a set of topic partitions. The type "
                                   "of elections supported are preferred replicas and unclean replicas.")
    add_connection_args(p, required=False, config_help="Configuration properties files to pass to the admin client",
                        config_aliases=("--admin.config",))
    p.add_argument("--election-type", metavar="ELECTION_TYPE",
                   help="Type of election to attempt: PREFERRED (only if the current leader is not the preferred "
                        "replica) or UNCLEAN (only if the partition has no leader). REQUIRED.")
    p.add_argument("--all-topic-partitions", action="store_true",
                   help="Perform election on all of the eligible topic partitions based on the type of election. "
                        "Not allowed if --topic or --path-to-json-file is specified.")
    p.add_argument("--topic", help="Name of topic for which to perform an election. Not allowed if "
                                   "--path-to-json-file or --all-topic-partitions is specified.")
    p.add_argument("--partition", type=int, metavar="PARTITION_ID",
                   help="Partition id for which to perform an election. REQUIRED if --topic is specified.")
    p.add_argument("--path-to-json-file", metavar="PATH",
                   help='The JSON file with the list of partitions for which leader elections should be performed: '
                        '{"partitions": [{"topic": "foo", "partition": 1}, {"topic": "foobar", "partition": 2}]}. '
                        "Not allowed if --all-topic-partitions or --topic flags are specified.")
    p.set_defaults(run=run, parser=p)


def run(args: argparse.Namespace) -> int:
    return run_guarded("leader-election", lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    from bus.client.admin import AdminClient, ElectionType

    election_type = _validate(args)
    partitions: list[TopicPartition] | None = None
    if args.path_to_json_file:
        partitions = parse_election_data(_read(args.path_to_json_file))
    elif args.topic is not None:
        partitions = [TopicPartition(args.topic, args.partition)]
    conf = load_client_config(args)
    conf.setdefault("default.api.timeout.ms", DEFAULT_API_TIMEOUT_MS)
    conf.setdefault("request.timeout.ms", int(conf["default.api.timeout.ms"]) // 2)
    try:
        admin = AdminClient(conf)
    except ValueError as exc:
        raise ToolError(str(exc)) from None
    with admin:
        results = admin.elect_leaders(ElectionType[election_type], partitions)
    return report(election_type, results)


def _validate(args: argparse.Namespace) -> str:
    """The election type, once the flags pass LeaderElectionCommandOptions.validate's checks."""
    missing = [flag for flag, value in (("bootstrap-server", args.bootstrap_server),
                                        ("election-type", args.election_type)) if not value]
    if missing:
        raise ToolError(f"Missing required option(s): {', '.join(missing)}")
    election_type = args.election_type.upper()
    if election_type not in ELECTION_TYPES:
        raise ToolError(f"Invalid --election-type {args.election_type!r}: one of {', '.join(ELECTION_TYPES)}")
    chosen = [args.topic is not None, args.all_topic_partitions, args.path_to_json_file is not None]
    if sum(chosen) != 1:
        raise ToolError("One and only one of the following options is required: topic, all-topic-partitions, "
                        "path-to-json-file")
    if args.topic is not None and args.partition is None:
        raise ToolError("Missing required option(s): partition")
    if args.topic is None and args.partition is not None:
        raise ToolError("Option partition is only allowed if topic is used")
    return election_type


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ToolError(f"Cannot read --path-to-json-file {path}: {exc}") from None


def parse_election_data(text: str) -> list[TopicPartition]:
    """The partitions of Kafka's replica election JSON, in file order; malformed input is a ToolError."""
    if not text.strip():
        raise ToolError("Replica election data is empty")
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ToolError(f"Replica election data is not valid JSON: {exc}") from None
    if not isinstance(data, dict) or "partitions" not in data:
        raise ToolError('Replica election data is missing "partitions" field')
    entries = data["partitions"]
    if not isinstance(entries, list):
        raise ToolError('Replica election data: "partitions" must be a list')
    partitions = []
    for entry in entries:
        topic = entry.get("topic") if isinstance(entry, dict) else None
        partition = entry.get("partition") if isinstance(entry, dict) else None
        if not isinstance(topic, str) or not isinstance(partition, int) or isinstance(partition, bool):
            raise ToolError(f'Replica election data: each entry needs a "topic" string and a "partition" integer, '
                            f"got {json.dumps(entry)}")
        partitions.append(TopicPartition(topic, partition))
    duplicates = sorted(str(tp) for tp, count in Counter(partitions).items() if count > 1)
    if duplicates:
        raise ToolError(f"Replica election data contains duplicate partitions: {', '.join(duplicates)}")
    return partitions


def report(election_type: str, results: Mapping[TopicPartition, AdminError | None]) -> int:
    """Print the outcome as LeaderElectionCommand does; a ToolError (exit 1) when any partition could not be
    elected."""
    ordered = sorted(results.items())
    succeeded = [str(tp) for tp, error in ordered if error is None]
    noop = [str(tp) for tp, error in ordered if error is not None and error.code == ErrorCode.election_not_needed]
    failed = [(tp, error) for tp, error in ordered
              if error is not None and error.code != ErrorCode.election_not_needed]
    if succeeded:
        print(f"Successfully completed leader election ({election_type}) for partitions {', '.join(succeeded)}")
    if noop:
        print(f"Valid replica already elected for partitions {', '.join(noop)}")
    for tp, error in failed:
        print(f"Error completing leader election ({election_type}) for partition: {tp}: {error}")
    if failed:
        raise ToolError(f"{len(failed)} replica(s) could not be elected")
    return 0
