"""The authorizer's decisions against Kafka's StandardAuthorizer semantics, the ACL filters of DescribeAcls and
DeleteAcls, the envelope's principal serde, and that a check does not grow with the number of ACLs."""

from __future__ import annotations

import functools
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from bus.controller.controller import ControllerError, QuorumController
from bus.controller.image import MetadataImage, acl_record, remove_acl_record, snapshot_records
from bus.controller.metadata_log.local_file import MetadataLog
from bus.security.acls import (
    ANONYMOUS,
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    AclBinding,
    AclBindingFilter,
    AclIndex,
    AclOperation,
    InvalidAcl,
    PatternType,
    PermissionType,
    ResourceType,
    deserialize_principal,
    operations_bit_field,
    serialize_principal,
)
from bus.security.authorizer import StandardAuthorizer

Op, T, P, A = AclOperation, ResourceType, PatternType, PermissionType
TOPIC, GROUP, CLUSTER = T.TOPIC, T.GROUP, T.CLUSTER


@dataclass(frozen=True)
class Asker:
    principal: str = "User:alice"
    client_host: str = "10.0.0.1"
    api_key: int = 3


def acl(name: str, operation: AclOperation = Op.READ, permission: PermissionType = A.ALLOW, *,
        resource_type: ResourceType = TOPIC, pattern: PatternType = P.LITERAL, principal: str = "User:alice",
        host: str = "*") -> AclBinding:
    return AclBinding(resource_type, name, pattern, principal, host, operation, permission)


def authorizer(*acls: AclBinding, super_users: tuple[str, ...] = (), allow_if_none: bool = False
               ) -> tuple[StandardAuthorizer, AclIndex]:
    index = AclIndex()
    for binding in acls:
        index.add(uuid.uuid4(), binding)
    return StandardAuthorizer(lambda: index, super_users, allow_if_none), index


def allowed(auth: StandardAuthorizer, operation: AclOperation, name: str, resource_type: ResourceType = TOPIC,
            asker: Asker = Asker()) -> bool:
    return auth.authorize(asker, operation, resource_type, name)


def test_literal_acl_matches_only_its_name_and_its_principal() -> None:
    auth, _ = authorizer(acl("orders"))
    assert allowed(auth, Op.READ, "orders")
    assert not allowed(auth, Op.READ, "orders2")
    assert not allowed(auth, Op.READ, "order")
    assert not allowed(auth, Op.WRITE, "orders")
    assert not allowed(auth, Op.READ, "orders", asker=Asker(principal="User:bob"))
    assert not allowed(auth, Op.READ, "orders", GROUP)


def test_prefixed_acl_matches_names_starting_with_it() -> None:
    auth, _ = authorizer(acl("capture.", pattern=P.PREFIXED))
    assert allowed(auth, Op.READ, "capture.vehicle")
    assert allowed(auth, Op.READ, "capture.")
    assert not allowed(auth, Op.READ, "capture")
    assert not allowed(auth, Op.READ, "xcapture.vehicle")


def test_wildcard_resource_and_wildcard_principal() -> None:
    auth, _ = authorizer(acl("*", principal="User:*"))
    assert allowed(auth, Op.READ, "anything", asker=Asker(principal="User:carol"))
    assert allowed(auth, Op.READ, "orders")
    assert not allowed(auth, Op.READ, "orders", GROUP)
    # Kafka matches "User:*" (its WILDCARD_KAFKA_PRINCIPAL) against every principal, whatever its type.
    assert allowed(auth, Op.READ, "orders", asker=Asker(principal="Group:ops"))


def test_host_star_and_a_specific_host() -> None:
    auth, _ = authorizer(acl("orders", host="10.0.0.1"), acl("audit", host="*"))
    assert allowed(auth, Op.READ, "orders")
    assert not allowed(auth, Op.READ, "orders", asker=Asker(client_host="10.0.0.2"))
    assert allowed(auth, Op.READ, "audit", asker=Asker(client_host="10.0.0.2"))


def test_deny_wins_over_allow_wherever_it_is() -> None:
    auth, _ = authorizer(acl("*"), acl("orders", permission=A.DENY),
                         acl("pay", pattern=P.PREFIXED), acl("payments", Op.ALL, A.DENY, principal="User:*"))
    assert allowed(auth, Op.READ, "audit")
    assert not allowed(auth, Op.READ, "orders")
    assert allowed(auth, Op.READ, "payroll")
    assert not allowed(auth, Op.READ, "payments")  # a DENY of ALL denies READ
    deny_host, _ = authorizer(acl("t"), acl("t", permission=A.DENY, host="10.0.0.1"))
    assert not allowed(deny_host, Op.READ, "t")
    assert allowed(deny_host, Op.READ, "t", asker=Asker(client_host="10.9.9.9"))


def test_implied_operations_come_from_allow_acls_only() -> None:
    auth, _ = authorizer(acl("r", Op.READ), acl("w", Op.WRITE), acl("d", Op.DELETE), acl("a", Op.ALTER),
                         acl("ac", Op.ALTER_CONFIGS), acl("c", Op.CREATE))
    for name in ("r", "w", "d", "a"):
        assert allowed(auth, Op.DESCRIBE, name), name
    assert not allowed(auth, Op.DESCRIBE, "c")  # CREATE implies nothing
    assert not allowed(auth, Op.DESCRIBE, "ac")
    assert allowed(auth, Op.DESCRIBE_CONFIGS, "ac")
    assert not allowed(auth, Op.WRITE, "r")  # implication goes one way
    # A DENY of READ does not deny DESCRIBE (only ALLOW ACLs imply).
    deny, _ = authorizer(acl("t", Op.DESCRIBE), acl("t", Op.READ, A.DENY))
    assert allowed(deny, Op.DESCRIBE, "t")
    assert not allowed(deny, Op.READ, "t")


def test_all_allows_every_operation() -> None:
    auth, _ = authorizer(acl(CLUSTER_NAME, Op.ALL, resource_type=CLUSTER))
    for operation in SUPPORTED_OPERATIONS[CLUSTER]:
        assert allowed(auth, operation, CLUSTER_NAME, CLUSTER)


def test_super_users_are_allowed_everything_even_against_deny() -> None:
    auth, _ = authorizer(acl("*", Op.ALL, A.DENY, principal="User:*"), super_users=("User:admin", ANONYMOUS))
    assert allowed(auth, Op.WRITE, "orders", asker=Asker(principal="User:admin"))
    assert allowed(auth, Op.ALTER, CLUSTER_NAME, CLUSTER, asker=Asker(principal=ANONYMOUS))
    assert not allowed(auth, Op.WRITE, "orders")


def test_allow_everyone_if_no_acl_found_only_where_no_acl_matches_the_resource() -> None:
    auth, _ = authorizer(acl("orders", principal="User:bob"), acl("pay", pattern=P.PREFIXED, principal="User:bob"),
                         allow_if_none=True)
    assert allowed(auth, Op.WRITE, "audit")  # no ACL on it at all
    assert not allowed(auth, Op.READ, "orders")  # an ACL on it, for someone else: default deny
    assert not allowed(auth, Op.READ, "payroll")  # a prefixed one covers it
    assert allowed(auth, Op.READ, "orders", asker=Asker(principal="User:bob"))
    strict, _ = authorizer(acl("orders", principal="User:bob"))
    assert not allowed(strict, Op.WRITE, "audit")


def test_authorized_operations_and_batches() -> None:
    auth, _ = authorizer(acl("orders", Op.WRITE), acl("orders", Op.DESCRIBE_CONFIGS))
    ops = auth.authorized_operations(Asker(), TOPIC, "orders")
    assert ops == operations_bit_field([Op.WRITE, Op.DESCRIBE, Op.DESCRIBE_CONFIGS])
    assert auth.authorized(Asker(), Op.DESCRIBE, TOPIC, ["orders", "audit", "orders"]) == {"orders"}


def test_authorize_by_resource_type() -> None:
    asker = Asker()
    auth, _ = authorizer(acl("pay", Op.WRITE, pattern=P.PREFIXED))
    assert auth.authorize_by_resource_type(asker, Op.WRITE, TOPIC)
    assert not auth.authorize_by_resource_type(asker, Op.WRITE, GROUP)
    dominated, _ = authorizer(acl("payments", Op.WRITE), acl("pay", Op.WRITE, A.DENY, pattern=P.PREFIXED))
    assert not dominated.authorize_by_resource_type(asker, Op.WRITE, TOPIC)
    wildcard_deny, _ = authorizer(acl("*", Op.WRITE), acl("*", Op.WRITE, A.DENY, principal="User:*"))
    assert not wildcard_deny.authorize_by_resource_type(asker, Op.WRITE, TOPIC)
    other_host, _ = authorizer(acl("t", Op.WRITE, host="10.9.9.9"))
    assert not other_host.authorize_by_resource_type(asker, Op.WRITE, TOPIC)


def test_denials_are_logged_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    auth, _ = authorizer(acl("orders"))
    with caplog.at_level(logging.INFO, logger="kafka.authorizer.logger"):
        assert not allowed(auth, Op.WRITE, "orders")
        assert not auth.authorize(Asker(), Op.READ, TOPIC, "quiet", log_if_denied=False)
        assert allowed(auth, Op.READ, "orders")
    assert (auth.allowed, auth.denied) == (1, 2)
    messages = [r.getMessage() for r in caplog.records if r.name == "kafka.authorizer.logger"]
    assert messages == ["Principal = User:alice is Denied operation = WRITE from host = 10.0.0.1 on resource = "
                        "Topic:LITERAL:orders for request = Metadata with resourceRefCount = 1 based on rule "
                        "DefaultDeny"]


def _filter(resource_type: ResourceType = T.ANY, name: str | None = None, pattern: PatternType = P.ANY,
            principal: str | None = None, host: str | None = None, operation: AclOperation = Op.ANY,
            permission: PermissionType = A.ANY) -> AclBindingFilter:
    return AclBindingFilter(resource_type, name, pattern, principal, host, operation, permission)


def test_filters_any_match_and_exact() -> None:
    literal, prefixed, wildcard = acl("capture.vehicle"), acl("capture.", pattern=P.PREFIXED), acl("*")
    group = acl("capture.vehicle", resource_type=GROUP, principal="User:bob", permission=A.DENY)
    everything = [literal, prefixed, wildcard, group]

    def matching(f: AclBindingFilter) -> list[AclBinding]:
        return [b for b in everything if f.matches(b)]

    assert matching(_filter()) == everything
    assert matching(_filter(TOPIC)) == [literal, prefixed, wildcard]
    # MATCH: every ACL that applies to the named resource (literal, prefixes, wildcard), of any pattern type.
    assert matching(_filter(TOPIC, "capture.vehicle", P.MATCH)) == [literal, prefixed, wildcard]
    assert matching(_filter(TOPIC, "capture.face", P.MATCH)) == [prefixed, wildcard]
    # ANY with a name: exactly that name, any pattern type; a pattern type: exactly that one.
    assert matching(_filter(T.ANY, "capture.vehicle", P.ANY)) == [literal, group]
    assert matching(_filter(TOPIC, "capture.", P.PREFIXED)) == [prefixed]
    assert matching(_filter(TOPIC, "capture.vehicle", P.PREFIXED)) == []
    assert matching(_filter(principal="User:bob")) == [group]
    assert matching(_filter(permission=A.DENY)) == [group]
    assert matching(_filter(host="10.0.0.1")) == []
    with pytest.raises(InvalidAcl):
        _filter(T.UNKNOWN).validate()
    with pytest.raises(InvalidAcl):
        _filter(operation=Op.UNKNOWN).validate()


def test_new_acls_are_validated_as_kafka_does() -> None:
    acl("t").validate()
    for bad in (acl("t", pattern=P.MATCH), acl("t", Op.ANY), acl("t", permission=A.ANY), acl(""),
                acl("t", resource_type=T.ANY), acl("other", resource_type=CLUSTER), acl("t", principal="alice")):
        with pytest.raises(InvalidAcl):
            bad.validate()


def test_the_index_follows_adds_removes_and_copies() -> None:
    auth, index = authorizer()
    first, second = uuid.uuid4(), uuid.uuid4()
    assert not allowed(auth, Op.READ, "pay.x")  # builds the search index, which must then follow changes
    index.add(first, acl("pay.", pattern=P.PREFIXED))
    index.add(second, acl("pay.x", permission=A.DENY))
    assert not allowed(auth, Op.READ, "pay.x") and allowed(auth, Op.READ, "pay.y")
    copy = index.copy()
    index.remove(second)
    assert allowed(auth, Op.READ, "pay.x")
    assert len(copy) == 2 and copy.id_of(acl("pay.x", permission=A.DENY)) == second


def test_acl_records_apply_and_snapshot() -> None:
    image = MetadataImage()
    acl_id = uuid.uuid4()
    binding = acl("pay.", Op.WRITE, pattern=P.PREFIXED, host="10.0.0.1")
    image.apply(acl_record(acl_id, binding))
    image.apply(acl_record(uuid.uuid4(), acl("gone")))
    replayed = MetadataImage()
    for record in snapshot_records(image):
        replayed.apply(record)
    assert dict(replayed.acls.items()) == dict(image.acls.items())
    replayed.apply(remove_acl_record(acl_id))
    assert list(replayed.acls) == [acl("gone")]


def test_principal_serde_round_trips() -> None:
    for principal in ("User:alice", ANONYMOUS, "User:ümlaut with spaces", "Group:ops:team"):
        assert deserialize_principal(serialize_principal(principal)) == principal
    with pytest.raises(ValueError):
        deserialize_principal(b"\x00\x01junk")
    with pytest.raises(ValueError):
        deserialize_principal(b"")


def _many_acls(count: int) -> list[AclBinding]:
    """`count` ACLs of the kinds a large deployment has: literal and prefixed topics and groups of many users,
    with prefixes of many lengths."""
    acls = []
    for i in range(count):
        user = f"User:app{i % 500}"
        kind = i % 4
        if kind == 0:
            acls.append(acl(f"topic-{i}", Op.READ, principal=user))
        elif kind == 1:
            acls.append(acl(f"team{i % 97}.svc{i}."[: 6 + i % 20], Op.WRITE, pattern=P.PREFIXED, principal=user))
        elif kind == 2:
            acls.append(acl(f"group-{i}", Op.READ, resource_type=GROUP, principal=user))
        else:
            acls.append(acl(f"topic-{i}", Op.WRITE, A.DENY, principal=user, host="10.1.1.1"))
    return acls


def _per_check_us(auth: StandardAuthorizer, checks: list[Callable[[], bool]], rounds: int = 5) -> float:
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        for check in checks:
            check()
        best = min(best, time.perf_counter() - started)
    return best / len(checks) * 1e6


def test_a_check_does_not_grow_with_the_number_of_acls() -> None:
    asker = Asker(principal="User:app7")
    names = [f"topic-{i}" for i in range(0, 400, 3)] + [f"team{i}.svc{i}.x" for i in range(100)]
    timings = {}
    for count in (10, 10_000):
        auth, _ = authorizer(*_many_acls(count))
        checks: list[Callable[[], bool]] = [
            functools.partial(auth.authorize, asker, op, TOPIC, name, log_if_denied=False)
            for name in names for op in (Op.READ, Op.WRITE, Op.DESCRIBE)]
        timings[count] = _per_check_us(auth, checks)
    print(f"\nauthorization check: {timings[10]:.2f} us with 10 ACLs, {timings[10_000]:.2f} us with 10,000 ACLs")
    # Linear in the ACLs would be ~1000x; a few dictionary lookups per prefix length in use stay within a small
    # factor (more prefix lengths are in use with 10,000 ACLs: up to 20 here against 3).
    assert timings[10_000] < 4 * timings[10] + 2, timings


def test_the_controller_creates_and_deletes_acls_as_kafkas_acl_control_manager(tmp_path: Path) -> None:
    controller = QuorumController(MetadataLog(tmp_path), node_id=1, default_partitions=1,
                                  default_replication_factor=1)
    grant, deny = acl("pay.", Op.WRITE, pattern=P.PREFIXED), acl("pay.x", Op.WRITE, A.DENY)
    results = controller.create_acls([grant, grant, deny, acl("", Op.READ), acl("t", Op.ANY)])
    assert [None if r is None else (r.code, r.message) for r in results] == [
        None, None, None, (ErrorCode.invalid_request, "Invalid empty resource name"),
        (ErrorCode.invalid_request, "Invalid operation ANY")]
    assert sorted(map(str, controller.image.acls)) == sorted(map(str, (grant, deny)))  # committed once each
    controller.create_acls([grant])  # it exists: nothing new
    assert len(controller.image.acls) == 2
    # Two filters matching the same ACL both report it; it is removed once. An UNKNOWN filter fails alone.
    writes = _filter(TOPIC, operation=Op.WRITE)
    outcomes = controller.delete_acls([writes, _filter(TOPIC, "pay.x", P.MATCH), _filter(T.UNKNOWN)])
    assert outcomes[0] == [grant, deny] and outcomes[1] == [grant, deny]
    assert isinstance(outcomes[2], ControllerError) and outcomes[2].code == ErrorCode.invalid_request
    assert len(controller.image.acls) == 0
    # They are in the log: a controller opened on it again has the same ACLs.
    controller.create_acls([grant])
    controller.log.close()
    reopened = QuorumController(MetadataLog(tmp_path), node_id=1, default_partitions=1,
                                default_replication_factor=1)
    assert list(reopened.image.acls) == [grant]
    reopened.log.close()
