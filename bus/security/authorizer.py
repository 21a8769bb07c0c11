"""Authorization with the semantics of Kafka's StandardAuthorizer (`authorizer.class.name=org.apache.kafka.metadata.
authorizer.StandardAuthorizer`).

A request's principal ("User:alice") from a host is allowed an operation on a resource when:
- the principal is one of `super.users`; else
- no DENY ACL applies and at least one ALLOW ACL does. An ACL applies when its pattern matches the resource name
  (LITERAL: that name, or the wildcard "*"; PREFIXED: a prefix of it), its principal is the request's or "User:*",
  its host is the request's or "*", and its operation is the one asked, ALL, or (ALLOW ACLs only) one that implies
  it: READ, WRITE, DELETE and ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS; else
- no ACL at all has a pattern matching the resource, whatever its principal, host or operation, and
  `allow.everyone.if.no.acl.found` is true.

The ACLs are the metadata image's (`AclIndex`, committed ACL records), read through a callable so a snapshot that
replaces the image is seen at once. A check looks up the buckets whose pattern can match the name, so it does not
grow with the number of ACLs. Every decision is counted; a denial the request asked for explicitly is logged at
INFO on the `kafka.authorizer.logger` logger in Kafka's words, one only used to filter a listing or to compute
authorized operations at TRACE (level 5), an allowed access at DEBUG.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Protocol

from kio.schema.index import api_key_map

from bus.config.broker import BrokerConfig
from bus.security.acls import (
    RESOURCE_TYPE_NAMES,
    SUPPORTED_OPERATIONS,
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AclBinding,
    AclBindingFilter,
    AclIndex,
    AclOperation,
    PatternType,
    PermissionType,
    ResourceType,
    operations_bit_field,
)

TRACE = 5

audit = logging.getLogger("kafka.authorizer.logger")

_O = AclOperation
IMPLIES_DESCRIBE = frozenset({_O.DESCRIBE, _O.READ, _O.WRITE, _O.DELETE, _O.ALTER})
IMPLIES_DESCRIBE_CONFIGS = frozenset({_O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS})
BY_RESOURCE_TYPE_PROBE = "hardcode"  # the name Kafka's authorizeByResourceType checks first (super users)


class AuthorizableRequest(Protocol):
    """Who asks (Kafka's AuthorizableRequestContext): a RequestContext is one."""

    @property
    def principal(self) -> str: ...

    @property
    def client_host(self) -> str: ...

    @property
    def api_key(self) -> int: ...


def _api_name(api_key: int) -> str:
    """Kafka's ApiKeys name ("CreateTopics") of an API key."""
    return "".join(part.capitalize() for part in api_key_map.get(api_key, str(api_key)).split("_"))


def _applies(acl: AclBinding, operation: AclOperation, host: str) -> bool | None:
    """Kafka's StandardAuthorizerData.findResult for an ACL whose pattern and principal match: True (allow), False
    (deny) or None (it says nothing about this host and operation). Implied operations count for ALLOW ACLs only: a
    DENY of READ does not deny DESCRIBE."""
    if acl.host != WILDCARD and acl.host != host:
        return None
    if acl.operation != AclOperation.ALL:
        if acl.permission == PermissionType.ALLOW:
            if operation == AclOperation.DESCRIBE:
                implied = acl.operation in IMPLIES_DESCRIBE
            elif operation == AclOperation.DESCRIBE_CONFIGS:
                implied = acl.operation in IMPLIES_DESCRIBE_CONFIGS
            else:
                implied = acl.operation == operation
            if not implied:
                return None
        elif acl.operation != operation:
            return None
    return acl.permission == PermissionType.ALLOW


class StandardAuthorizer:
    def __init__(self, acls: Callable[[], AclIndex], super_users: Iterable[str] = (),
                 allow_everyone_if_no_acl_found: bool = False) -> None:
        self._acls = acls
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self.allowed = 0  # decisions since start, for the metrics
        self.denied = 0

    @classmethod
    def from_config(cls, config: BrokerConfig, acls: Callable[[], AclIndex]) -> StandardAuthorizer | None:
        """The authorizer `authorizer.class.name` names (the config allows only this one), or None when it is empty:
        every request is allowed."""
        if not config["authorizer.class.name"]:
            return None
        super_users = [user.strip() for user in config["super.users"].split(";") if user.strip()]
        return cls(acls, super_users, config["allow.everyone.if.no.acl.found"])

    @property
    def acl_count(self) -> int:
        return len(self._acls())

    def acls(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        """Every ACL the filter matches (DescribeAcls)."""
        return [acl for acl in self._acls() if acl_filter.matches(acl)]

    def authorize(self, request: AuthorizableRequest, operation: AclOperation, resource_type: ResourceType,
                  name: str, *, log_if_allowed: bool = True, log_if_denied: bool = True, ref_count: int = 1) -> bool:
        """Whether `request`'s principal may do `operation` on the literal resource `name` (Kafka's
        StandardAuthorizer.authorize of one Action)."""
        rule: AclBinding | str
        if request.principal in self.super_users:
            allowed, rule = True, "SuperUser"
        else:
            allowed, rule = self._decide(request, operation, resource_type, name)
        if allowed:
            self.allowed += 1
            level = logging.DEBUG if log_if_allowed else TRACE
        else:
            self.denied += 1
            level = logging.INFO if log_if_denied else TRACE
        if audit.isEnabledFor(level):
            audit.log(level, "Principal = %s is %s operation = %s from host = %s on resource = %s:%s:%s for request "
                      "= %s with resourceRefCount = %d based on rule %s", request.principal,
                      "Allowed" if allowed else "Denied", operation.name, request.client_host,
                      RESOURCE_TYPE_NAMES.get(resource_type, resource_type.name), PatternType.LITERAL.name, name,
                      _api_name(request.api_key), ref_count,
                      f"MatchingAcl(acl={rule})" if isinstance(rule, AclBinding) else rule)
        return allowed

    def _decide(self, request: AuthorizableRequest, operation: AclOperation, resource_type: ResourceType,
                name: str) -> tuple[bool, AclBinding | str]:
        """The decision and the rule that made it: the deciding ACL, or Kafka's name of the default rule."""
        principals = (request.principal, WILDCARD_PRINCIPAL)
        host = request.client_host
        allow: AclBinding | None = None
        found = False  # some ACL's pattern matches the resource
        for bucket in self._acls().buckets_for(resource_type, name):
            found = True
            for principal in principals:
                for acl in bucket.get(principal, ()):
                    result = _applies(acl, operation, host)
                    if result is False:
                        return False, acl  # DENY wins
                    if result:
                        allow = acl
        if allow is not None:
            return True, allow
        if not found and self.allow_everyone_if_no_acl_found:
            return True, "DefaultAllow"
        return False, "DefaultDeny"

    def authorized(self, request: AuthorizableRequest, operation: AclOperation, resource_type: ResourceType,
                   names: Iterable[str], *, log_if_denied: bool = True) -> set[str]:
        """The names among `names` the principal may do `operation` on, each checked once however often it is
        named (Kafka's AuthHelper.filterByAuthorized, the count logged as resourceRefCount)."""
        counts = Counter(names)
        return {name for name, count in counts.items()
                if self.authorize(request, operation, resource_type, name, log_if_denied=log_if_denied,
                                  ref_count=count)}

    def authorized_operations(self, request: AuthorizableRequest, resource_type: ResourceType, name: str) -> int:
        """The bit field of the operations of `resource_type` the principal may do on `name` (Kafka's
        AuthHelper.authorizedOperations): checks that grant nothing, logged at TRACE only."""
        return operations_bit_field(
            op for op in SUPPORTED_OPERATIONS[resource_type]
            if self.authorize(request, op, resource_type, name, log_if_allowed=False, log_if_denied=False))

    def authorize_by_resource_type(self, request: AuthorizableRequest, operation: AclOperation,
                                   resource_type: ResourceType) -> bool:
        """Whether the principal may do `operation` on at least one resource of `resource_type` (Kafka's
        Authorizer.authorizeByResourceType, which InitProducerId of an idempotent producer asks with WRITE on
        topics): an ALLOW ACL naming the principal (or "User:*") and the host, for the operation or ALL, whose
        pattern no DENY ACL's pattern covers. Reads only the ACLs naming the principal or the wildcard."""
        if self.authorize(request, operation, resource_type, BY_RESOURCE_TYPE_PROBE, log_if_denied=False,
                          ref_count=0):
            return True
        host = request.client_host
        denied: dict[PatternType, set[str]] = {PatternType.LITERAL: set(), PatternType.PREFIXED: set()}
        allowed: dict[PatternType, set[str]] = {PatternType.LITERAL: set(), PatternType.PREFIXED: set()}
        wildcard_allowed = False
        index = self._acls()
        for principal in dict.fromkeys((request.principal, WILDCARD_PRINCIPAL)):
            for acl in index.of_principal(principal):
                if acl.resource_type != resource_type or acl.host not in (host, WILDCARD):
                    continue
                if acl.operation not in (operation, AclOperation.ALL):
                    continue
                if acl.permission == PermissionType.DENY:
                    if acl.pattern_type == PatternType.LITERAL and acl.resource_name == WILDCARD:
                        return False
                    denied[acl.pattern_type].add(acl.resource_name)
                elif acl.pattern_type == PatternType.LITERAL and acl.resource_name == WILDCARD:
                    wildcard_allowed = True
                else:
                    allowed[acl.pattern_type].add(acl.resource_name)
        if wildcard_allowed:
            return True
        for pattern_type, names in allowed.items():
            for name in names:
                if pattern_type == PatternType.LITERAL and name in denied[PatternType.LITERAL]:
                    continue
                if not any(name[:end] in denied[PatternType.PREFIXED] for end in range(1, len(name) + 1)):
                    return True
        return False
