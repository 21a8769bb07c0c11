"""`bus configs`: describe and alter topic and broker configs and users' SCRAM credentials, like kafka-configs.sh.

Kafka's ConfigCommand shapes: `--describe` prints `Dynamic configs for topic t are:` (or `All configs
...` with `--all`) and one `  name=value sensitive=false synonyms={SOURCE:name=value, ...}` line per
config; `--alter --add-config k=v,k2=[a,b] --delete-config k` goes through IncrementalAlterConfigs and
prints `Completed updating config for topic t.`. Deleting a config that is not set fails with
`Invalid config(s): k`, as Kafka does, so a typo is not silently accepted. `--entity-type users` manages SCRAM
credentials (`configs_users.py`).
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
from typing import TYPE_CHECKING

from bus.tools import configs_users
from bus.tools._common import ToolError, add_connection_args, admin_client, one_action, run_guarded

if TYPE_CHECKING:
    from bus.client.admin import AdminClient, ConfigEntry, ConfigResource

ENTITY_TYPES = ("topics", "brokers", "users")
_VALID_KEY = re.compile(r"[$a-zA-Z0-9._-]*")


def add_parser(sub: argparse._SubParsersAction, name: str) -> None:
    p = sub.add_parser(name, help="Describe or alter topic and broker configs and SCRAM users (kafka-configs).",
                       description="This tool helps to manipulate and describe entity config for a topic, broker or "
                                   "user.")
    add_connection_args(p, config_help="Property file containing configs to be passed to Admin Client. This is "
                                       "used only with --bootstrap-server option for describing and altering "
                                       "broker configs.")
    p.add_argument("--describe", action="store_true", help="List configs for the given entity.")
    p.add_argument("--alter", action="store_true", help="Alter the configuration for the entity.")
    p.add_argument("--all", action="store_true", help="List all configs for the given topic or broker, including "
                                                      "defaults (with --describe).")
    p.add_argument("--entity-type", action="append", choices=ENTITY_TYPES, metavar="{topics,brokers,users}",
                   help="Type of entity (topics/brokers/users).")
    p.add_argument("--entity-name", action="append", help="Name of entity (topic name/broker id/user principal).")
    p.add_argument("--entity-default", action="store_true",
                   help="Default entity name for brokers (applies to the cluster-wide default config).")
    p.add_argument("--topic", help="The topic's name (same as --entity-type topics --entity-name <topic>).")
    p.add_argument("--broker", help="The broker's id (same as --entity-type brokers --entity-name <id>).")
    p.add_argument("--user", help="The user's principal name (same as --entity-type users --entity-name <user>).")
    p.add_argument("--broker-defaults", action="store_true",
                   help="The config defaults for all brokers (same as --entity-type brokers --entity-default).")
    p.add_argument("--add-config", metavar="K=V,K2=V2",
                   help="Key Value pairs of configs to add. Square brackets can be used to group values which "
                        "contain commas: 'k1=v1,k2=[v1,v2,v2],k3=v3'. For users: "
                        "'SCRAM-SHA-256=[iterations=8192,password=alice-secret],SCRAM-SHA-512=[password=alice-secret]'.")
    p.add_argument("--add-config-file", metavar="FILE", help="Path to a properties file with configs to add.")
    p.add_argument("--delete-config", action="append", metavar="K,K2", help="Config keys to remove: 'k1,k2'.")
    p.set_defaults(run=run, parser=p)


def _entity(args: argparse.Namespace) -> tuple[str, str | None]:
    """(entity type, entity name or None for "all of them", "" for the broker default)."""
    types = list(args.entity_type or [])
    names = list(args.entity_name or [])
    if args.topic is not None:
        types.append("topics")
        names.append(args.topic)
    if args.broker is not None:
        types.append("brokers")
        names.append(args.broker)
    if args.user is not None:
        types.append("users")
        names.append(args.user)
    if args.broker_defaults or args.entity_default:
        if args.broker_defaults:
            types.append("brokers")
        names.append("")
    if not types:
        raise ToolError("At least one entity type must be specified")
    if len(set(types)) > 1 or len(types) > 1:
        raise ToolError("Only one entity type may be specified: " + ", ".join(types))
    if len(names) > 1:
        raise ToolError("Only one entity name may be specified")
    entity_type = types[0]
    name = names[0] if names else None
    if args.alter and name is None:
        raise ToolError("An entity name must be specified with --alter")
    if entity_type == "topics" and name == "":
        raise ToolError("--entity-default is not supported for topics")
    if entity_type == "users" and name == "":
        raise ToolError("The use of --entity-default or --user-defaults is not allowed with User SCRAM Credentials "
                        "using --bootstrap-server.")
    if entity_type == "brokers" and name:
        try:
            int(name)
        except ValueError:
            raise ToolError(f"The entity name for brokers must be a valid integer broker id, found: {name}") from None
    return entity_type, name


def parse_add_config(text: str | None, file: str | None) -> dict[str, str]:
    """Kafka's `--add-config` grammar: commas split pairs except inside [...], brackets are then dropped."""
    props: dict[str, str] = {}
    if file:
        from bus.config.properties import PropertiesError, load_properties

        try:
            props.update(load_properties(file))
        except (OSError, PropertiesError) as exc:
            raise ToolError(f"Cannot read --add-config-file {file}: {exc}") from None
    if text:
        outside_brackets = r"(?=[^\]]*(?:\[|$))"
        for pair in re.split("," + outside_brackets, text):
            pieces = re.split(r"\s*=\s*" + outside_brackets, pair)
            if len(pieces) != 2:
                raise ToolError('Invalid entity config: all configs to be added must be in the format "key=val" or '
                                ' "key=[val1,val2]" to group values which contain commas.')
            props[pieces[0].strip()] = re.sub(r"\[?\]?", "", pieces[1]).strip()
    for key in props:
        if not _VALID_KEY.fullmatch(key):
            raise ToolError(f"Invalid character found for config key: {key}")
    return props


def parse_delete_config(items: list[str] | None) -> list[str]:
    return [key.strip() for item in items or () for key in item.split(",") if key.strip()]


def run(args: argparse.Namespace) -> int:
    return run_guarded("config", lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    one_action(args, ("describe", "alter"), "--describe, --alter")
    entity_type, name = _entity(args)
    if args.alter:
        adds = parse_add_config(args.add_config, args.add_config_file)
        deletes = parse_delete_config(args.delete_config)
        if not adds and not deletes:
            raise ToolError("At least one of --add-config, --add-config-file, or --delete-config must be specified "
                            "with --alter")
        if args.all:
            raise ToolError("--all can only be used with --describe")
        with admin_client(args) as admin:
            return _alter(admin, entity_type, name or "", adds, deletes, sys.argv)
    if args.add_config or args.delete_config or args.add_config_file:
        raise ToolError("--add-config and --delete-config can only be used with --alter")
    with admin_client(args) as admin:
        if entity_type == "users":
            configs_users.describe_users(admin, name)
            return 0
        return _describe(admin, entity_type, name, args.all)


def _resource(entity_type: str, name: str) -> ConfigResource:
    from bus.client.admin import ConfigResource, ConfigResourceType

    kind = ConfigResourceType.TOPIC if entity_type == "topics" else ConfigResourceType.BROKER
    return ConfigResource(kind, name)


def _dynamic_source(entity_type: str, name: str) -> int:
    from bus.client.admin import ConfigSource

    if entity_type == "topics":
        return ConfigSource.DYNAMIC_TOPIC_CONFIG
    return ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG if name == "" else ConfigSource.DYNAMIC_BROKER_CONFIG


def _entries(admin: AdminClient, entity_type: str, name: str, describe_all: bool,
             synonyms: bool = True) -> list[ConfigEntry]:
    resource = _resource(entity_type, name)
    config = admin.describe_configs([resource], include_synonyms=synonyms).get(resource, {})
    wanted = _dynamic_source(entity_type, name)
    return sorted((e for e in config.values() if describe_all or e.source == wanted), key=lambda e: e.name)


def format_entry(entry: ConfigEntry) -> str:
    synonyms = ", ".join(f"{s.source.name}:{s.name}={_value(s.value)}" for s in entry.synonyms)
    return f"  {entry.name}={_value(entry.value)} sensitive={str(entry.is_sensitive).lower()} synonyms={{{synonyms}}}"


def _value(value: str | None) -> str:
    return "null" if value is None else value


def _describe(admin: AdminClient, entity_type: str, name: str | None, describe_all: bool) -> int:
    singular = entity_type[:-1]
    if name is None:
        if entity_type == "topics":
            entities = admin.list_topics(include_internal=True)
        else:
            entities = [str(b.node_id) for b in admin.describe_cluster().brokers] + [""]
    else:
        if not describe_all:
            if entity_type == "topics" and name not in admin.list_topics(include_internal=True):
                print(f"The {singular} '{name}' doesn't exist and doesn't have dynamic config.")
                return 0
            if entity_type == "brokers" and name != "" and \
                    name not in {str(b.node_id) for b in admin.describe_cluster().brokers}:
                print(f"The {singular} '{name}' doesn't exist and doesn't have dynamic config.")
                return 0
        entities = [name]
    for entity in entities:
        if entity == "":
            print(f"Default configs for {entity_type} in the cluster are:")
        else:
            print(f"{'All' if describe_all else 'Dynamic'} configs for {singular} {entity} are:")
        for entry in _entries(admin, entity_type, entity, describe_all):
            print(format_entry(entry))
    return 0


def _alter(admin: AdminClient, entity_type: str, name: str, adds: dict[str, str], deletes: list[str],
           argv: list[str]) -> int:
    from bus.client.admin import AdminError

    try:
        if entity_type == "users":
            configs_users.alter_user(admin, name, adds, deletes)
        else:
            _alter_configs(admin, entity_type, name, adds, deletes)
    except AdminError as exc:
        raise ToolError(f"Error while executing config command with args '{shlex.join(argv[2:])}'\n{exc}") from None
    if name:
        print(f"Completed updating config for {entity_type[:-1]} {name}.")
    else:
        print(f"Completed updating default config for {entity_type} in the cluster.")
    return 0


def _alter_configs(admin: AdminClient, entity_type: str, name: str, adds: dict[str, str], deletes: list[str]) -> None:
    from bus.client.admin import AlterConfigOp

    current = {e.name for e in _entries(admin, entity_type, name, describe_all=False, synonyms=False)}
    invalid = [key for key in deletes if key not in current]
    if invalid:
        raise ToolError("Invalid config(s): " + ",".join(invalid))
    ops = [AlterConfigOp.delete(k) for k in deletes] + [AlterConfigOp.set(k, v) for k, v in adds.items()]
    admin.incremental_alter_configs({_resource(entity_type, name): ops})
