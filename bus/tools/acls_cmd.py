"""`bus acls`: add, remove and list ACLs, like kafka-acls.sh (Kafka 4.0's AclCommand).

The flags, their checks and the output are Kafka's: `--add` prints `Adding ACLs for resource `ResourcePattern(...)`:`
and one `(principal=..., host=..., operation=..., permissionType=...)` line per ACL, `--list` prints `Current ACLs
for resource ...` per resource pattern (under `ACLs for principal `...`` with `--principal`), and `--remove` asks
for confirmation unless `--force`. `--producer` and `--consumer` expand to the ACLs those roles need, as in Kafka.
Resources and ACLs are printed sorted (Kafka prints them in hash order). Requests go through the native admin
client's CreateAcls, DescribeAcls and DeleteAcls.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING, NamedTuple

from bus.security.acls import (
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    PatternType,
    PermissionType,
    ResourceType,
)
from bus.security.principal import parse_principal
from bus.tools._common import ToolError, add_connection_args, admin_client, one_action, run_guarded

if TYPE_CHECKING:
    from bus.client.admin import AdminClient

WILDCARD_HOST = "*"
PATTERN_TYPES = ("literal", "prefixed", "any", "match")
_OPERATIONS = [op for op in AclOperation if op not in (AclOperation.UNKNOWN, AclOperation.ANY)]
_O = AclOperation
PRODUCER_TOPIC_OPERATIONS = (_O.WRITE, _O.DESCRIBE, _O.CREATE)
PRODUCER_TRANSACTIONAL_ID_OPERATIONS = (_O.WRITE, _O.DESCRIBE)
CONSUMER_TOPIC_OPERATIONS = (_O.READ, _O.DESCRIBE)


class Resource(NamedTuple):
    """A resource pattern (adding) or a resource pattern filter (listing, removing): Kafka's ResourcePattern(Filter)."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType

    def __str__(self) -> str:
        return f"ResourcePattern(resourceType={self.resource_type.name}, name={self.name}, " \
               f"patternType={self.pattern_type.name})"

    def binding(self, acl: Entry) -> AclBinding:
        return AclBinding(self.resource_type, self.name, self.pattern_type, acl.principal, acl.host, acl.operation,
                          acl.permission)

    def matching(self, acl: Entry | None = None) -> AclBindingFilter:
        """The filter of `acl` on this resource pattern filter, or of every ACL on it."""
        if acl is None:
            return AclBindingFilter(self.resource_type, self.name, self.pattern_type, None, None, AclOperation.ANY,
                                    PermissionType.ANY)
        return AclBindingFilter(self.resource_type, self.name, self.pattern_type, acl.principal, acl.host,
                                acl.operation, acl.permission)


class Entry(NamedTuple):
    """An access control entry: Kafka's AccessControlEntry."""

    principal: str
    host: str
    operation: AclOperation
    permission: PermissionType

    def __str__(self) -> str:
        return f"(principal={self.principal}, host={self.host}, operation={self.operation.name}, " \
               f"permissionType={self.permission.name})"


def pascal_case(operation: AclOperation) -> str:
    """Kafka's operation names in its tools: CLUSTER_ACTION -> ClusterAction."""
    return "".join(word.capitalize() for word in operation.name.split("_"))


def add_parser(sub: argparse._SubParsersAction, name: str) -> None:
    p = sub.add_parser(name, help="Add, remove and list ACLs (kafka-acls).",
                       description="This tool helps to manage acls on kafka.")
    add_connection_args(p, config_help="A property file containing configs to be passed to Admin Client.")
    p.add_argument("--add", action="store_true", help="Indicates you are trying to add ACLs.")
    p.add_argument("--remove", action="store_true", help="Indicates you are trying to remove ACLs.")
    p.add_argument("--list", action="store_true", help="List ACLs for the specified resource, use --topic <topic> or "
                                                       "--group <group> or --cluster to specify a resource.")
    p.add_argument("--topic", action="append", help="topic to which ACLs should be added or removed. A value of '*' "
                                                    "indicates ACL should apply to all topics.")
    p.add_argument("--group", action="append", help="Consumer Group to which the ACLs should be added or removed. A "
                                                    "value of '*' indicates the ACLs should apply to all groups.")
    p.add_argument("--cluster", action="store_true", help="Add/Remove cluster ACLs.")
    p.add_argument("--transactional-id", action="append",
                   help="The transactionalId to which ACLs should be added or removed. A value of '*' indicates the "
                        "ACLs should apply to all transactionalIds.")
    p.add_argument("--idempotent", action="store_true",
                   help="Enable idempotence for the producer. This should be used in combination with the --producer "
                        "option.")
    p.add_argument("--resource-pattern-type", default="literal", type=str.lower, choices=PATTERN_TYPES,
                   metavar="|".join(t.upper() for t in PATTERN_TYPES),
                   help="The type of the resource pattern or pattern filter. When adding acls, this should be a "
                        "specific pattern type, e.g. 'literal' or 'prefixed'. When listing or removing acls, 'any' "
                        "matches any pattern type with the exact resource name and 'match' every acl that affects "
                        "the supplied resource(s) (default: LITERAL).")
    p.add_argument("--operation", action="append",
                   help="Operation that is being allowed or denied (repeatable, default: All). Valid operation "
                        "names are: " + ", ".join(pascal_case(op) for op in _OPERATIONS))
    p.add_argument("--allow-principal", action="append",
                   help="principal is in principalType:name format. For example, User:'*' is the wild card "
                        "indicating all users.")
    p.add_argument("--deny-principal", action="append",
                   help="principal is in principalType:name format. DENY RULES TAKE PRECEDENCE OVER ALLOW RULES.")
    p.add_argument("--principal", action="append",
                   help="List ACLs for the specified principal (principalType:name; repeatable, with --list).")
    p.add_argument("--allow-host", action="append",
                   help="Host from which principals listed in --allow-principal will have access (default: *).")
    p.add_argument("--deny-host", action="append",
                   help="Host from which principals listed in --deny-principal will be denied access (default: *).")
    p.add_argument("--producer", action="store_true",
                   help="Convenience option to add/remove ACLs for producer role. This will generate ACLs that "
                        "allows WRITE,DESCRIBE and CREATE on topic.")
    p.add_argument("--consumer", action="store_true",
                   help="Convenience option to add/remove ACLs for consumer role. This will generate ACLs that "
                        "allows READ,DESCRIBE on topic and READ on group.")
    p.add_argument("--force", action="store_true", help="Assume Yes to all queries and do not prompt.")
    p.set_defaults(run=run, parser=p)


# -- the flags --------------------------------------------------------------------------------------------------


def check_args(args: argparse.Namespace) -> str:
    """The action, once the flags pass AclCommandOptions.checkArgs (Kafka's messages)."""
    action = one_action(args, ("list", "add", "remove"), "--list, --add, --remove. ")
    _invalid_with(args, "list", "producer", "consumer", "allow_host", "allow_principal", "deny_host", "deny_principal")
    _invalid_with(args, "producer", "operation", "deny_principal", "deny_host")
    _invalid_with(args, "consumer", "operation", "deny_principal", "deny_host")
    if args.principal and not args.list:
        raise ToolError("The --principal option is only available if --list is set")
    if args.producer and not args.topic:
        raise ToolError("With --producer you must specify a --topic")
    if args.idempotent and not args.producer:
        raise ToolError("The --idempotent option is only available if --producer is set")
    if args.consumer and (not args.topic or not args.group or
                          (not args.producer and (args.cluster or args.transactional_id))):
        raise ToolError("With --consumer you must specify a --topic and a --group and no --cluster or "
                        "--transactional-id option should be specified.")
    return action


def _invalid_with(args: argparse.Namespace, used: str, *invalid: str) -> None:
    """Kafka's CommandLineUtils.checkInvalidArgs."""
    if getattr(args, used):
        for name in invalid:
            if getattr(args, name):
                raise ToolError(f'Option "[{_flag(used)}]" can\'t be used with option "[{_flag(name)}]"')


def _flag(dest: str) -> str:
    return dest.replace("_", "-")


def parse_operation(name: str) -> AclOperation:
    """Kafka's operation names (`Read`, `IdempotentWrite`, `All`), in any case, with or without underscores."""
    wanted = name.strip().replace("_", "").upper()
    for operation in _OPERATIONS:
        if operation.name.replace("_", "") == wanted:
            return operation
    raise ToolError(f"Unknown operation name {name.strip()}")


def _principals(values: list[str] | None) -> list[str]:
    try:
        return [str(parse_principal(value.strip())) for value in values or ()]
    except ValueError as exc:
        raise ToolError(str(exc)) from None


def resources(args: argparse.Namespace, *, required: bool) -> list[Resource]:
    """The resources named by --topic, --cluster (and --idempotent), --group and --transactional-id."""
    pattern = PatternType[args.resource_pattern_type.upper()]
    found = [Resource(ResourceType.TOPIC, topic.strip(), pattern) for topic in args.topic or ()]
    if pattern == PatternType.LITERAL and (args.cluster or args.idempotent):
        found.append(Resource(ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL))
    found += [Resource(ResourceType.GROUP, group.strip(), pattern) for group in args.group or ()]
    found += [Resource(ResourceType.TRANSACTIONAL_ID, tid, pattern) for tid in args.transactional_id or ()]
    if not found and required:
        raise ToolError("You must provide at least one resource: --topic <topic> or --cluster or --group <group> or "
                        "--delegation-token <Delegation Token ID>")
    return list(dict.fromkeys(found))


def entries(args: argparse.Namespace, operations: Iterable[AclOperation]) -> frozenset[Entry]:
    """Every (principal, host, operation) of the allowed and denied principals (hosts default to `*`)."""
    out: set[Entry] = set()
    for principals, hosts, permission in ((args.allow_principal, args.allow_host, PermissionType.ALLOW),
                                          (args.deny_principal, args.deny_host, PermissionType.DENY)):
        names = _principals(principals)
        for host in [h.strip() for h in hosts] if hosts else [WILDCARD_HOST] if names else []:
            out.update(Entry(name, host, operation, permission) for name in names for operation in operations)
    return frozenset(out)


def resource_acls(args: argparse.Namespace) -> dict[Resource, frozenset[Entry]]:
    """What to add or remove per resource (Kafka's getResourceFilterToAcls): the flags' ACLs, or the producer's
    and the consumer's, each operation checked against what the resource type supports."""
    plan: dict[Resource, frozenset[Entry]] = {}
    if not args.producer and not args.consumer:
        acls = entries(args, [parse_operation(name) for name in args.operation or ["All"]])
        plan = dict.fromkeys(resources(args, required=True), acls)
    if args.producer:
        for resource in resources(args, required=True):
            if resource.resource_type == ResourceType.TOPIC:
                plan[resource] = entries(args, PRODUCER_TOPIC_OPERATIONS)
            elif resource.resource_type == ResourceType.TRANSACTIONAL_ID:
                plan[resource] = entries(args, PRODUCER_TRANSACTIONAL_ID_OPERATIONS)
            elif resource.resource_type == ResourceType.CLUSTER and args.idempotent:
                plan[resource] = entries(args, [AclOperation.IDEMPOTENT_WRITE])
    if args.consumer:
        for resource in resources(args, required=True):
            operations = {ResourceType.TOPIC: CONSUMER_TOPIC_OPERATIONS, ResourceType.GROUP: (AclOperation.READ,)}
            if resource.resource_type in operations:
                plan[resource] = plan.get(resource, frozenset()) | entries(args, operations[resource.resource_type])
    for resource, acls in plan.items():
        valid = [*SUPPORTED_OPERATIONS[resource.resource_type], AclOperation.ALL]
        if any(acl.operation not in valid for acl in acls):
            raise ToolError(f"ResourceType {resource.resource_type.name} only supports operations "
                            f"[{', '.join(op.name for op in valid)}]")
    return plan


# -- the actions ------------------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    return run_guarded("ACL", lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    action = check_args(args)
    if action == "add":
        if args.resource_pattern_type not in ("literal", "prefixed"):
            raise ToolError(f"A '--resource-pattern-type' value of '{args.resource_pattern_type.upper()}' is not "
                            "valid when adding acls.")
        plan = resource_acls(args)
        if any(not acls for acls in plan.values()):
            raise ToolError("You must specify one of: --allow-principal, --deny-principal when trying to add ACLs.")
        with admin_client(args) as admin:
            _add(admin, plan)
    elif action == "remove":
        plan = resource_acls(args)
        with admin_client(args) as admin:
            _remove(admin, plan, args.force)
    else:
        filters = resources(args, required=False)
        principals = _principals(args.principal)
        with admin_client(args) as admin:
            _list(admin, filters, principals)
    return 0


def _lines(acls: Iterable[Entry]) -> str:
    return "\n".join(f"\t{acl}" for acl in sorted(acls, key=str))


def _add(admin: AdminClient, plan: dict[Resource, frozenset[Entry]]) -> None:
    for resource, acls in plan.items():
        print(f"Adding ACLs for resource `{resource}`: \n {_lines(acls)}\n")
        admin.create_acls([resource.binding(acl) for acl in sorted(acls, key=str)])


def _remove(admin: AdminClient, plan: dict[Resource, frozenset[Entry]], force: bool) -> None:
    for resource, acls in plan.items():
        if acls:
            question = f"Are you sure you want to remove ACLs: \n {_lines(acls)}\n from resource filter " \
                       f"`{resource}`? (y/n)"
            filters = [resource.matching(acl) for acl in sorted(acls, key=str)]
        else:
            question = f"Are you sure you want to delete all ACLs for resource filter `{resource}`? (y/n)"
            filters = [resource.matching()]
        if force or _confirm(question):
            admin.delete_acls(filters)


def _confirm(question: str) -> bool:
    print(question, flush=True)
    answer = sys.stdin.readline()
    return answer.strip().lower() == "y"


def _list(admin: AdminClient, filters: list[Resource], principals: list[str]) -> None:
    from bus.client.admin import ANY_ACL

    wanted = [resource.matching() for resource in filters] or [ANY_ACL]
    by_resource: dict[Resource, set[Entry]] = {}
    for acl_filter in wanted:
        for binding in admin.describe_acls(acl_filter):
            resource = Resource(binding.resource_type, binding.resource_name, binding.pattern_type)
            by_resource.setdefault(resource, set()).add(
                Entry(binding.principal, binding.host, binding.operation, binding.permission))
    if not principals:
        _print_resource_acls(by_resource)
    for principal in principals:
        print(f"ACLs for principal `{principal}`")
        _print_resource_acls({resource: {acl for acl in acls if acl.principal == principal}
                              for resource, acls in by_resource.items()})


def _print_resource_acls(by_resource: dict[Resource, set[Entry]]) -> None:
    for resource in sorted(by_resource, key=lambda r: (r.resource_type, r.name, r.pattern_type)):
        if by_resource[resource]:
            print(f"Current ACLs for resource `{resource}`:\n{_lines(by_resource[resource])}\n")
