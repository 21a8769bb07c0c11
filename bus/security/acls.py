"""Kafka's ACL model: resource patterns, access control entries, filters, and the index the authorizer searches.

The codes are the wire codes of Kafka's ResourceType, PatternType, AclOperation and AclPermissionType, so a binding
read from CreateAcls is stored and answered unchanged. Principals are strings as ACLs name them ("User:alice",
"User:*"): a connection's principal reaches the authorizer as the same string (Kafka's `KafkaPrincipal.toString`).

`AclIndex` is the metadata image's ACL state. It keeps every binding by its id (what the records and snapshots
carry) and, built when first searched, an index by exact resource and by prefix length: an authorization looks up
only the buckets that can match the resource name, so 10,000 ACLs cost no more than 10 (Kafka's StandardAuthorizer
gets the same from a sorted set). A copy shares nothing with its original and builds its own index only if searched:
the snapshot writer copies the image and never searches it.
"""

from __future__ import annotations

import enum
import struct
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class PermissionType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


WILDCARD = "*"  # a literal resource name or an ACL host matching every one
CLUSTER_NAME = "kafka-cluster"  # the only name of the CLUSTER resource
ANONYMOUS = "User:ANONYMOUS"  # the principal of an unauthenticated (PLAINTEXT) connection
WILDCARD_PRINCIPAL = "User:*"  # an ACL principal matching every principal

# Kafka's SecurityUtils.resourceTypeName: how the authorizer log names a resource type.
RESOURCE_TYPE_NAMES = {
    ResourceType.TOPIC: "Topic",
    ResourceType.GROUP: "Group",
    ResourceType.CLUSTER: "Cluster",
    ResourceType.TRANSACTIONAL_ID: "TransactionalId",
    ResourceType.DELEGATION_TOKEN: "DelegationToken",
    ResourceType.USER: "User",
}

_O = AclOperation
# Kafka's AclEntry.supportedOperations: the operations each resource type has, which the `authorized_operations`
# bit fields (Metadata, DescribeCluster, DescribeGroups, ConsumerGroupDescribe) report on.
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (_O.READ, _O.WRITE, _O.CREATE, _O.DESCRIBE, _O.DELETE, _O.ALTER, _O.DESCRIBE_CONFIGS,
                         _O.ALTER_CONFIGS),
    ResourceType.GROUP: (_O.READ, _O.DESCRIBE, _O.DELETE, _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS),
    ResourceType.CLUSTER: (_O.CREATE, _O.CLUSTER_ACTION, _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS, _O.IDEMPOTENT_WRITE,
                           _O.ALTER, _O.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (_O.DESCRIBE, _O.WRITE, _O.TWO_PHASE_COMMIT),
    ResourceType.DELEGATION_TOKEN: (_O.DESCRIBE,),
    ResourceType.USER: (_O.CREATE_TOKENS, _O.DESCRIBE_TOKENS),
}


def operations_bit_field(operations: Iterable[AclOperation]) -> int:
    """Kafka's Utils.to32BitField: bit `code` set for each operation (the `authorized_operations` fields)."""
    return sum(1 << int(op) for op in set(operations))


class InvalidAcl(ValueError):
    """A binding or filter Kafka refuses with INVALID_REQUEST; the message is Kafka's."""


def _enum(cls: type[enum.IntEnum], code: int) -> enum.IntEnum:
    """Kafka's `fromCode`: an unknown code reads as UNKNOWN."""
    try:
        return cls(code)
    except ValueError:
        return cls(0)


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL (Kafka's AclBinding: a resource pattern and an access control entry)."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission: PermissionType

    @classmethod
    def of(cls, resource_type: int, resource_name: str, pattern_type: int, principal: str, host: str,
           operation: int, permission: int) -> AclBinding:
        """A binding from wire codes (an unknown code becomes UNKNOWN, which `validate` refuses)."""
        return cls(ResourceType(_enum(ResourceType, resource_type)), resource_name,
                   PatternType(_enum(PatternType, pattern_type)), principal, host,
                   AclOperation(_enum(AclOperation, operation)), PermissionType(_enum(PermissionType, permission)))

    def validate(self) -> None:
        """Kafka's checks of a new ACL (AclApis.handleCreateAcls, AclControlManager.validateNewAcl), in their
        order; raises InvalidAcl."""
        if self.resource_type == ResourceType.CLUSTER and self.resource_name != CLUSTER_NAME:
            raise InvalidAcl(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
        if not self.resource_name:
            raise InvalidAcl("Invalid empty resource name")
        if self.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
            raise InvalidAcl(f"Invalid resourceType {self.resource_type.name}")
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise InvalidAcl(f"Invalid patternType {self.pattern_type.name}")
        if self.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
            raise InvalidAcl(f"Invalid operation {self.operation.name}")
        if self.permission not in (PermissionType.ALLOW, PermissionType.DENY):
            raise InvalidAcl(f"Invalid permissionType {self.permission.name}")
        if ":" not in self.principal:
            raise InvalidAcl(f"Could not parse principal from `{self.principal}` (no colon is present separating "
                             "the principal type from the principal name)")

    def __str__(self) -> str:
        """Kafka's StandardAcl.toString, as the authorizer log shows the ACL that decided."""
        return (f"StandardAcl(resourceType={self.resource_type.name}, resourceName={self.resource_name}, "
                f"patternType={self.pattern_type.name}, principal={self.principal}, host={self.host}, "
                f"operation={self.operation.name}, permissionType={self.permission.name})")


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """Which ACLs DescribeAcls lists and DeleteAcls removes (Kafka's AclBindingFilter). None matches any name,
    principal or host; ANY matches any code; pattern type MATCH matches the ACLs that would apply to the named
    resource: the literal one, the literal wildcard and every prefix of it."""

    resource_type: ResourceType
    resource_name: str | None
    pattern_type: PatternType
    principal: str | None
    host: str | None
    operation: AclOperation
    permission: PermissionType

    @classmethod
    def of(cls, resource_type: int, resource_name: str | None, pattern_type: int, principal: str | None,
           host: str | None, operation: int, permission: int) -> AclBindingFilter:
        return cls(ResourceType(_enum(ResourceType, resource_type)), resource_name,
                   PatternType(_enum(PatternType, pattern_type)), principal, host,
                   AclOperation(_enum(AclOperation, operation)), PermissionType(_enum(PermissionType, permission)))

    def validate(self) -> None:
        """Kafka's AclControlManager.validateFilter: a filter with an UNKNOWN part matches nothing knowable."""
        if self.resource_type == ResourceType.UNKNOWN or self.pattern_type == PatternType.UNKNOWN:
            raise InvalidAcl("Unknown patternFilter.")
        if self.operation == AclOperation.UNKNOWN or self.permission == PermissionType.UNKNOWN:
            raise InvalidAcl("Unknown entryFilter.")

    def matches(self, acl: AclBinding) -> bool:
        return self._matches_pattern(acl) and self._matches_entry(acl)

    def _matches_pattern(self, acl: AclBinding) -> bool:
        """Kafka's ResourcePatternFilter.matches."""
        if self.resource_type != ResourceType.ANY and self.resource_type != acl.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and self.pattern_type != acl.pattern_type:
            return False
        if self.resource_name is None:
            return True
        if self.pattern_type in (PatternType.ANY, acl.pattern_type):
            return self.resource_name == acl.resource_name
        if acl.pattern_type == PatternType.LITERAL:
            return self.resource_name == acl.resource_name or acl.resource_name == WILDCARD
        return self.resource_name.startswith(acl.resource_name)

    def _matches_entry(self, acl: AclBinding) -> bool:
        """Kafka's AccessControlEntryFilter.matches."""
        if self.principal is not None and self.principal != acl.principal:
            return False
        if self.host is not None and self.host != acl.host:
            return False
        if self.operation != AclOperation.ANY and self.operation != acl.operation:
            return False
        return self.permission == PermissionType.ANY or self.permission == acl.permission


Bucket = dict[str, list[AclBinding]]  # principal -> the ACLs of one resource pattern naming it


class _Lookup:
    """The search index over a set of bindings: by (resource type, pattern type, name), then by principal."""

    __slots__ = ("buckets", "by_principal", "prefix_counts", "prefix_lengths")

    def __init__(self, bindings: Iterable[AclBinding]) -> None:
        self.buckets: dict[tuple[ResourceType, PatternType, str], Bucket] = {}
        self.prefix_counts: dict[ResourceType, dict[int, int]] = {}  # name length -> PREFIXED ACLs of it
        self.prefix_lengths: dict[ResourceType, tuple[int, ...]] = {}  # the lengths in use, ascending
        self.by_principal: dict[str, dict[AclBinding, None]] = {}
        for binding in bindings:
            self.add(binding)

    def add(self, acl: AclBinding) -> None:
        key = (acl.resource_type, acl.pattern_type, acl.resource_name)
        self.buckets.setdefault(key, {}).setdefault(acl.principal, []).append(acl)
        if acl.pattern_type == PatternType.PREFIXED:
            counts = self.prefix_counts.setdefault(acl.resource_type, {})
            counts[len(acl.resource_name)] = counts.get(len(acl.resource_name), 0) + 1
            self.prefix_lengths[acl.resource_type] = tuple(sorted(counts))
        self.by_principal.setdefault(acl.principal, {})[acl] = None

    def remove(self, acl: AclBinding) -> None:
        key = (acl.resource_type, acl.pattern_type, acl.resource_name)
        bucket = self.buckets[key]
        bucket[acl.principal].remove(acl)
        if not bucket[acl.principal]:
            del bucket[acl.principal]
            if not bucket:
                del self.buckets[key]
        if acl.pattern_type == PatternType.PREFIXED:
            counts = self.prefix_counts[acl.resource_type]
            counts[len(acl.resource_name)] -= 1
            if not counts[len(acl.resource_name)]:
                del counts[len(acl.resource_name)]
                self.prefix_lengths[acl.resource_type] = tuple(sorted(counts))
        by_principal = self.by_principal[acl.principal]
        del by_principal[acl]
        if not by_principal:
            del self.by_principal[acl.principal]


class AclIndex:
    """Every ACL by id, as the metadata image holds them; see the module docstring."""

    __slots__ = ("_by_id", "_ids", "_lookup")

    def __init__(self, by_id: dict[uuid.UUID, AclBinding] | None = None) -> None:
        self._by_id: dict[uuid.UUID, AclBinding] = by_id or {}
        self._ids: dict[AclBinding, uuid.UUID] = {binding: acl_id for acl_id, binding in self._by_id.items()}
        self._lookup: _Lookup | None = None

    def __len__(self) -> int:
        return len(self._by_id)

    def items(self) -> Iterator[tuple[uuid.UUID, AclBinding]]:
        return iter(self._by_id.items())

    def __iter__(self) -> Iterator[AclBinding]:
        return iter(self._by_id.values())

    def id_of(self, binding: AclBinding) -> uuid.UUID | None:
        return self._ids.get(binding)

    def add(self, acl_id: uuid.UUID, binding: AclBinding) -> None:
        if acl_id in self._by_id:
            self.remove(acl_id)
        self._by_id[acl_id] = binding
        self._ids[binding] = acl_id
        if self._lookup is not None:
            self._lookup.add(binding)

    def remove(self, acl_id: uuid.UUID) -> None:
        binding = self._by_id.pop(acl_id)
        del self._ids[binding]
        if self._lookup is not None:
            self._lookup.remove(binding)

    def copy(self) -> AclIndex:
        return AclIndex(dict(self._by_id))

    def __deepcopy__(self, memo: dict[int, object]) -> AclIndex:
        return self.copy()  # bindings are immutable: sharing them is a deep copy

    def _search(self) -> _Lookup:
        if self._lookup is None:
            self._lookup = _Lookup(self._by_id.values())
        return self._lookup

    def buckets_for(self, resource_type: ResourceType, name: str) -> Iterator[Bucket]:
        """The ACL buckets whose pattern matches resource `name`: its literal ACLs, the PREFIXED ACLs of each of
        its prefixes (one lookup per prefix length in use), then the literal wildcard's. A handful of dictionary
        lookups, however many ACLs there are."""
        lookup = self._search()
        buckets = lookup.buckets
        literal = buckets.get((resource_type, PatternType.LITERAL, name))
        if literal is not None:
            yield literal
        for length in lookup.prefix_lengths.get(resource_type, ()):
            if length > len(name):
                break
            prefixed = buckets.get((resource_type, PatternType.PREFIXED, name[:length]))
            if prefixed is not None:
                yield prefixed
        if name != WILDCARD:
            wildcard = buckets.get((resource_type, PatternType.LITERAL, WILDCARD))
            if wildcard is not None:
                yield wildcard

    def of_principal(self, principal: str) -> Iterable[AclBinding]:
        """The ACLs naming `principal` exactly (Kafka's authorizeByResourceType reads those and the wildcard's)."""
        return self._search().by_principal.get(principal, {}).keys()


# -- principals ----------------------------------------------------------------------------------------------------


def principal_type_and_name(principal: str) -> tuple[str, str]:
    """Kafka's SecurityUtils.parseKafkaPrincipal: "User:alice" -> ("User", "alice")."""
    kind, colon, name = principal.partition(":")
    if not colon:
        raise InvalidAcl(f"Could not parse principal from `{principal}` (no colon is present separating the "
                         "principal type from the principal name)")
    return kind, name


_VERSION = struct.Struct(">h")


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _read_uvarint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 28:
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def serialize_principal(principal: str) -> bytes:
    """The principal as an Envelope's `request_principal` carries it (Kafka's DefaultKafkaPrincipalBuilder serde:
    version 0 of DefaultPrincipalData, version-prefixed: type, name, token_authenticated, no tagged fields)."""
    kind, name = principal_type_and_name(principal)
    out = bytearray(_VERSION.pack(0))
    for text in (kind, name):
        encoded = text.encode()
        out += _uvarint(len(encoded) + 1) + encoded
    out += b"\x00\x00"  # token_authenticated false, empty tagged fields
    return bytes(out)


def deserialize_principal(data: bytes) -> str:
    """The "Type:name" principal of `serialize_principal`'s bytes; ValueError when they are not such bytes."""
    if len(data) < _VERSION.size or _VERSION.unpack_from(data)[0] != 0:
        raise ValueError("not a version 0 DefaultPrincipalData")
    pos = _VERSION.size
    parts = []
    for _field in range(2):
        length, pos = _read_uvarint(data, pos)
        if length == 0 or pos + length - 1 > len(data):
            raise ValueError("bad principal string")
        parts.append(data[pos:pos + length - 1].decode())
        pos += length - 1
    return f"{parts[0]}:{parts[1]}"
