"""`bus storage`: prepare a node's storage before its first start, like kafka-storage.sh.

`format --config server.properties --cluster-id ID [--add-scram 'SCRAM-SHA-256=[name=admin,password=...]' ...]`
writes `meta.properties` (the node and cluster ids) into each log dir and the metadata dir, and the bootstrap
metadata (`bootstrap.json`: the SCRAM credentials, salted and hashed here, never stored as passwords) into the
metadata dir; the controller commits it with the cluster id when the cluster's metadata log starts, so the first
users can log in from the first start on (KIP-554's way to create the users that inter-broker or admin SASL needs
before any AlterUserScramCredentials can run). A formatted directory is refused unless `--ignore-formatted`, as in
Kafka. `info --config server.properties` prints the directories and the meta.properties found in them, and exits 1
for a directory that is missing or not formatted. `random-uuid` prints a new cluster id.
"""

from __future__ import annotations

import argparse
import base64
import binascii

from bus.config.broker import load_broker_config, random_cluster_id
from bus.config.definitions import ConfigError
from bus.config.properties import PropertiesError, load_properties
from bus.controller.bootstrap import write_bootstrap
from bus.controller.image import scram_credential_record
from bus.log.meta_properties import META_PROPERTIES, check_meta_properties
from bus.security.scram import ScramError
from bus.security.scram_formats import parse_add_scram
from bus.tools._common import ToolError, run_guarded


def add_parser(sub: argparse._SubParsersAction, name: str) -> None:
    p = sub.add_parser(name, help="Format a node's storage before its first start, or inspect it (kafka-storage).",
                       description="The Kafka storage tool.")
    actions = p.add_subparsers(dest="action", metavar="{format,info,random-uuid}", required=True)
    fmt = actions.add_parser("format", help="Format the log directories of a node.")
    fmt.add_argument("--config", "-c", required=True, metavar="FILE", help="The server.properties of the node.")
    fmt.add_argument("--cluster-id", "-t", required=True, metavar="ID", help="The cluster ID to use.")
    fmt.add_argument("--add-scram", "-S", action="append", default=[], metavar="CREDENTIAL",
                     help="A SCRAM credential to create: 'SCRAM-SHA-256=[name=alice,password=alice-secret]' "
                          "(also salt, saltedpassword, iterations; repeatable).")
    fmt.add_argument("--ignore-formatted", "-g", action="store_true",
                     help="When this option is passed, the format command will skip over already formatted "
                          "directories rather than failing.")
    info = actions.add_parser("info", help="Get information about the Kafka log directories on this node.")
    info.add_argument("--config", "-c", required=True, metavar="FILE", help="The server.properties of the node.")
    actions.add_parser("random-uuid", help="Print a random UUID to use as a cluster ID.")
    p.set_defaults(run=run, parser=p)


def run(args: argparse.Namespace) -> int:
    if args.action == "random-uuid":
        print(random_cluster_id())
        return 0
    if args.action == "info":
        return run_guarded("storage", lambda: _info(args))
    return run_guarded("storage", lambda: _format(args))


def _info(args: argparse.Namespace) -> int:
    """StorageTool's `info`: the node's directories, the meta.properties found in them, and what is wrong.

    Like Kafka it prints its findings on stdout and exits 1 when there is a problem: a directory that is missing,
    not a directory, not formatted (no meta.properties), or formatted for another node or cluster than the
    others (directory.id is each directory's own, so it is left out of the comparison).
    """
    try:
        config = load_broker_config(load_properties(args.config))
    except (PropertiesError, ConfigError) as exc:
        raise ToolError(f"Invalid configuration {args.config}: {exc}") from None
    found: list[str] = []
    problems: list[str] = []
    first: dict[str, str] | None = None
    for directory in sorted({*config.log_dirs, config.metadata_dir}):
        if not directory.is_dir():
            problems.append(f"{directory} does not exist" if not directory.exists() else
                            f"{directory} is not a directory")
            continue
        found.append(str(directory))
        path = directory / META_PROPERTIES
        if not path.exists():
            problems.append(f"{directory} is not formatted.")
            continue
        try:
            props = load_properties(path)
        except (OSError, PropertiesError) as exc:
            problems.append(f"Cannot read {path}: {exc}")
            continue
        if props.get("version") not in ("0", "1"):
            problems.append(f"Unsupported version for {path}: {props.get('version')}")
        elif first is None:
            first = props
        elif _owner(props) != _owner(first):
            problems.append(f"Metadata for {path} was {_format_props(props)}, but other directories featured "
                            f"{_format_props(first)}")
    if found:
        print("Found log director" + ("y:" if len(found) == 1 else "ies:"))
        for name in found:
            print(f"  {name}")
        print()
    if first is not None:
        print(f"Found metadata: {_format_props(first)}")
        print()
    if problems:
        print("Found problem" + (":" if len(problems) == 1 else "s:"))
        for problem in problems:
            print(f"  {problem}")
        print()
        return 1
    return 0


def _owner(props: dict[str, str]) -> dict[str, str]:
    return {key: value for key, value in props.items() if key != "directory.id"}


def _format_props(props: dict[str, str]) -> str:
    """As Kafka's RawMetaProperties prints them: `{cluster.id=..., node.id=1, version=1}`, keys sorted."""
    return "{" + ", ".join(f"{key}={props[key]}" for key in sorted(props)) + "}"


def _format(args: argparse.Namespace) -> int:
    try:
        config = load_broker_config(load_properties(args.config))
    except (PropertiesError, ConfigError) as exc:
        raise ToolError(f"Invalid configuration {args.config}: {exc}") from None
    cluster_id = args.cluster_id
    _check_cluster_id(cluster_id)
    configured = config.values.get("cluster.id")
    if configured and configured != cluster_id:
        raise ToolError(f"The cluster ID {cluster_id} does not match cluster.id={configured} in {args.config}")
    records = []
    for argument in args.add_scram:
        try:
            scram = parse_add_scram(argument)
        except ScramError as exc:
            raise ToolError(f"Error while parsing --add-scram: {exc}") from None
        records.append(scram_credential_record(scram.name, scram.mechanism.name, scram.credential))
    directories = sorted({*config.log_dirs, config.metadata_dir})
    formatted = [directory for directory in directories if (directory / META_PROPERTIES).exists()]
    if formatted and not args.ignore_formatted:
        raise ToolError(f"Log directory {formatted[0]} is already formatted. Use --ignore-formatted to ignore this "
                        "directory and format the others.")
    todo = [directory for directory in directories if directory not in formatted]
    if not todo:
        print("All of the log directories are already formatted.")
        return 0
    for directory in todo:
        directory.mkdir(parents=True, exist_ok=True)
        if directory == config.metadata_dir:  # before meta.properties: a dir half formatted is not formatted
            write_bootstrap(directory, records)
        check_meta_properties(directory, config.node_id, cluster_id)
        kind = "metadata" if directory == config.metadata_dir else "data"
        print(f"Formatting {kind} directory {directory} with cluster id {cluster_id}"
              + (f" and {len(records)} SCRAM credential(s)." if directory == config.metadata_dir else "."))
    return 0


def _check_cluster_id(cluster_id: str) -> None:
    """Kafka's `Uuid.fromString`: 16 bytes in URL-safe base64 without padding (what `random-uuid` prints)."""
    try:
        decoded = base64.urlsafe_b64decode(cluster_id + "==")
    except (binascii.Error, ValueError):
        decoded = b""
    if len(decoded) != 16:
        raise ToolError(f"Cluster ID string {cluster_id} does not appear to be a valid UUID: it does not decode to "
                        "the 16 bytes of a base64-encoded UUID")
