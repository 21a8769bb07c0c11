"""`bus acls` and `bus configs --entity-type users` without a broker: Kafka's flags, checks, expansions and output
(AclCommand, ConfigCommand), against fake admin clients that record what the tools ask for."""

from __future__ import annotations

import argparse
import io
from typing import Any

import pytest

from bus.client.admin import ScramCredentialInfo, UserScramCredentialDeletion, UserScramCredentialUpsertion
from bus.security.acls import AclBinding, AclBindingFilter, AclOperation, PatternType, PermissionType, ResourceType
from bus.tools import acls_cmd, configs_cmd, configs_users
from bus.tools._common import ToolError
from bus.tools.acls_cmd import Entry, Resource, check_args, parse_operation, resource_acls, resources

ALLOW, DENY = PermissionType.ALLOW, PermissionType.DENY
TOPIC = Resource(ResourceType.TOPIC, "orders", PatternType.LITERAL)


def parse(module: Any, *argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    module.add_parser(parser.add_subparsers(), "tool")
    return parser.parse_args(["tool", "--bootstrap-server", "b:9092", *argv])


def acls(*argv: str) -> argparse.Namespace:
    return parse(acls_cmd, *argv)


# -- bus acls: flags --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("argv", "message"), [
    ((), "exactly one action: --list, --add, --remove"),
    (("--add", "--list"), "exactly one action"),
    (("--list", "--allow-principal", "User:a"), 'Option "[list]" can\'t be used with option "[allow-principal]"'),
    (("--add", "--producer", "--topic", "t", "--operation", "Read"),
     'Option "[producer]" can\'t be used with option "[operation]"'),
    (("--add", "--principal", "User:a"), "--principal option is only available if --list is set"),
    (("--add", "--producer", "--group", "g"), "With --producer you must specify a --topic"),
    (("--add", "--idempotent", "--topic", "t"), "--idempotent option is only available if --producer is set"),
    (("--add", "--consumer", "--topic", "t"), "With --consumer you must specify a --topic and a --group"),
])
def test_acl_flag_checks_are_kafkas(argv: tuple[str, ...], message: str) -> None:
    with pytest.raises(ToolError, match=message.replace("[", r"\[").replace("]", r"\]")):
        check_args(acls(*argv))


def test_operation_names_in_kafkas_spellings() -> None:
    assert parse_operation("Read") == AclOperation.READ
    assert parse_operation("IdempotentWrite") == parse_operation("IDEMPOTENT_WRITE") == AclOperation.IDEMPOTENT_WRITE
    assert parse_operation(" describeconfigs ") == AclOperation.DESCRIBE_CONFIGS
    for bad in ("Any", "Unknown", "Reed"):
        with pytest.raises(ToolError, match=f"Unknown operation name {bad}"):
            parse_operation(bad)


def test_principals_hosts_and_operations_multiply_out() -> None:
    plan = resource_acls(acls("--add", "--topic", "orders", "--allow-principal", "User:alice", "--allow-principal",
                              "User:bob", "--allow-host", "10.0.0.1", "--allow-host", "10.0.0.2", "--deny-principal",
                              "User:mallory", "--operation", "Read", "--operation", "Write"))
    assert list(plan) == [TOPIC]
    entries = plan[TOPIC]
    assert len(entries) == 2 * 2 * 2 + 2  # allowed: principals x hosts x operations; denied: host * x operations
    assert Entry("User:bob", "10.0.0.2", AclOperation.WRITE, ALLOW) in entries
    assert Entry("User:mallory", "*", AclOperation.READ, DENY) in entries
    default = resource_acls(acls("--add", "--group", "g", "--allow-principal", "User:alice"))
    assert default == {Resource(ResourceType.GROUP, "g", PatternType.LITERAL):
                       frozenset({Entry("User:alice", "*", AclOperation.ALL, ALLOW)})}


def test_resources_and_pattern_types() -> None:
    prefixed = resources(acls("--list", "--topic", "ord", "--cluster", "--transactional-id", "tx",
                              "--resource-pattern-type", "PREFIXED"), required=True)
    assert prefixed == [Resource(ResourceType.TOPIC, "ord", PatternType.PREFIXED),
                        Resource(ResourceType.TRANSACTIONAL_ID, "tx", PatternType.PREFIXED)]  # no prefixed cluster
    literal = resources(acls("--list", "--cluster"), required=True)
    assert literal == [Resource(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL)]
    assert resources(acls("--list"), required=False) == []
    with pytest.raises(ToolError, match="You must provide at least one resource"):
        resources(acls("--add"), required=True)
    with pytest.raises(SystemExit):
        acls("--list", "--resource-pattern-type", "exact")


def test_producer_and_consumer_roles_expand_to_kafkas_acls() -> None:
    plan = resource_acls(acls("--add", "--producer", "--consumer", "--idempotent", "--topic", "orders", "--group",
                              "readers", "--transactional-id", "tx", "--allow-principal", "User:app"))

    def operations(resource_type: ResourceType) -> set[str]:
        return {e.operation.name for r, es in plan.items() if r.resource_type == resource_type for e in es}

    assert operations(ResourceType.TOPIC) == {"WRITE", "DESCRIBE", "CREATE", "READ"}
    assert operations(ResourceType.GROUP) == {"READ"}
    assert operations(ResourceType.TRANSACTIONAL_ID) == {"WRITE", "DESCRIBE"}
    assert operations(ResourceType.CLUSTER) == {"IDEMPOTENT_WRITE"}


def test_operations_a_resource_type_lacks_and_bad_principals_are_refused() -> None:
    with pytest.raises(ToolError, match=r"ResourceType GROUP only supports operations \[READ, DESCRIBE, DELETE, "
                                        r"DESCRIBE_CONFIGS, ALTER_CONFIGS, ALL\]"):
        resource_acls(acls("--add", "--group", "g", "--allow-principal", "User:a", "--operation", "Write"))
    with pytest.raises(ToolError, match="expected a string in format principalType:principalName but got alice"):
        resource_acls(acls("--add", "--topic", "t", "--allow-principal", "alice"))


@pytest.mark.parametrize(("argv", "message"), [
    (("--add", "--topic", "t", "--allow-principal", "User:a", "--resource-pattern-type", "match"),
     "A '--resource-pattern-type' value of 'MATCH' is not valid when adding acls."),
    (("--add", "--topic", "t", "--allow-host", "h"),
     "You must specify one of: --allow-principal, --deny-principal when trying to add ACLs."),
])
def test_adding_needs_a_specific_pattern_and_a_principal(argv: tuple[str, ...], message: str,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert acls_cmd.run(acls(*argv)) == 1
    assert capsys.readouterr().err == message + "\n"


# -- bus acls: what it sends and prints ----------------------------------------------------------------------------


class FakeAclAdmin:
    def __init__(self, bindings: list[AclBinding] | None = None) -> None:
        self.bindings = bindings or []
        self.created: list[AclBinding] = []
        self.deleted: list[AclBindingFilter] = []

    def create_acls(self, bindings: list[AclBinding]) -> None:
        self.created += bindings

    def delete_acls(self, filters: list[AclBindingFilter]) -> None:
        self.deleted += filters

    def describe_acls(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        return [b for b in self.bindings if acl_filter.matches(b)]


def test_add_prints_kafkas_lines_and_creates_the_bindings(capsys: pytest.CaptureFixture[str]) -> None:
    admin = FakeAclAdmin()
    plan = resource_acls(acls("--add", "--topic", "orders", "--allow-principal", "User:alice", "--operation", "Write",
                              "--operation", "Read"))
    acls_cmd._add(admin, plan)  # type: ignore[arg-type]
    assert capsys.readouterr().out == (
        "Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)`: \n"
        " \t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)\n"
        "\t(principal=User:alice, host=*, operation=WRITE, permissionType=ALLOW)\n\n")
    assert admin.created == [AclBinding(ResourceType.TOPIC, "orders", PatternType.LITERAL, "User:alice", "*", op, ALLOW)
                             for op in (AclOperation.READ, AclOperation.WRITE)]


def test_list_groups_by_resource_and_filters_by_principal(capsys: pytest.CaptureFixture[str]) -> None:
    admin = FakeAclAdmin([
        AclBinding(ResourceType.TOPIC, "orders", PatternType.LITERAL, "User:bob", "*", AclOperation.READ, ALLOW),
        AclBinding(ResourceType.TOPIC, "orders", PatternType.LITERAL, "User:alice", "*", AclOperation.WRITE, DENY),
        AclBinding(ResourceType.GROUP, "g", PatternType.PREFIXED, "User:alice", "h", AclOperation.READ, ALLOW),
    ])
    acls_cmd._list(admin, [], [])  # type: ignore[arg-type]
    assert capsys.readouterr().out == (
        "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)`:\n"
        "\t(principal=User:alice, host=*, operation=WRITE, permissionType=DENY)\n"
        "\t(principal=User:bob, host=*, operation=READ, permissionType=ALLOW)\n\n"
        "Current ACLs for resource `ResourcePattern(resourceType=GROUP, name=g, patternType=PREFIXED)`:\n"
        "\t(principal=User:alice, host=h, operation=READ, permissionType=ALLOW)\n\n")
    acls_cmd._list(admin, [TOPIC], ["User:bob"])  # type: ignore[arg-type]
    assert capsys.readouterr().out == (
        "ACLs for principal `User:bob`\n"
        "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)`:\n"
        "\t(principal=User:bob, host=*, operation=READ, permissionType=ALLOW)\n\n")


@pytest.mark.parametrize(("answer", "force", "removed"), [("n\n", False, False), ("y\n", False, True),
                                                          ("", False, False), ("", True, True)])
def test_remove_asks_unless_forced(answer: str, force: bool, removed: bool, monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(answer))
    admin = FakeAclAdmin()
    acls_cmd._remove(admin, resource_acls(acls("--remove", "--topic", "orders")), force)  # type: ignore[arg-type]
    everything = AclBindingFilter(ResourceType.TOPIC, "orders", PatternType.LITERAL, None, None, AclOperation.ANY,
                                  PermissionType.ANY)
    assert admin.deleted == ([everything] if removed else [])
    prompt = "Are you sure you want to delete all ACLs for resource filter " \
             "`ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)`? (y/n)\n"
    assert capsys.readouterr().out == ("" if force else prompt)


# -- bus configs --entity-type users ------------------------------------------------------------------------------


def test_scram_configs_become_upsertions_and_deletions() -> None:
    changes = configs_users.scram_alterations(
        "alice", configs_cmd.parse_add_config("SCRAM-SHA-256=[iterations=8192,password=alice-secret],"
                                              "SCRAM-SHA-512=[password=a,b]", None), ["SCRAM-SHA-512"])
    assert changes == [UserScramCredentialDeletion("alice", "SCRAM-SHA-512"),
                       UserScramCredentialUpsertion("alice", "SCRAM-SHA-256", 8192, "alice-secret"),
                       UserScramCredentialUpsertion("alice", "SCRAM-SHA-512", 4096, "a,b")]
    assert "alice-secret" not in repr(changes)
    default = configs_users.scram_alterations("a", {"SCRAM-SHA-256": "iterations=-1,password=p"}, [])
    assert default == [UserScramCredentialUpsertion("a", "SCRAM-SHA-256", 4096, "p")]


@pytest.mark.parametrize(("adds", "deletes", "message"), [
    ({"SCRAM-SHA-256": "iterations=100,password=topsecret"}, [],
     "Iterations 100 is less than the minimum 4096 required for SCRAM-SHA-256"),
    ({"SCRAM-SHA-256": "topsecret"}, [], "Invalid credential property SCRAM-SHA-256"),
    ({"retention.ms": "1"}, [], "Only quota and SCRAM credential configs can be added for 'users' using "
                                "--bootstrap-server. Unexpected config names: retention.ms"),
    ({}, ["SCRAM-SHA-1"], "can be deleted for 'users'"),
    ({"producer_byte_rate": "1024"}, [], "Client quota configs (producer_byte_rate) are not supported"),
])
def test_bad_user_configs_are_refused_without_echoing_the_password(adds: dict[str, str], deletes: list[str],
                                                                   message: str) -> None:
    with pytest.raises(ToolError) as raised:
        configs_users.scram_alterations("alice", adds, deletes)
    assert message in str(raised.value) and "topsecret" not in str(raised.value)


def test_user_entities() -> None:
    assert configs_cmd._entity(parse(configs_cmd, "--describe", "--user", "alice")) == ("users", "alice")
    assert configs_cmd._entity(parse(configs_cmd, "--describe", "--entity-type", "users")) == ("users", None)
    with pytest.raises(ToolError, match="--entity-default or --user-defaults is not allowed"):
        configs_cmd._entity(parse(configs_cmd, "--alter", "--entity-type", "users", "--entity-default"))


def test_describe_users_prints_kafkas_line(capsys: pytest.CaptureFixture[str]) -> None:
    class FakeScramAdmin:
        def describe_user_scram_credentials(self, users: list[str] | None) -> dict[str, list[ScramCredentialInfo]]:
            assert users == ["alice"]
            return {"alice": [ScramCredentialInfo("SCRAM-SHA-256", 8192), ScramCredentialInfo("SCRAM-SHA-512", 4096)]}

    configs_users.describe_users(FakeScramAdmin(), "alice")  # type: ignore[arg-type]
    assert capsys.readouterr().out == "SCRAM credential configs for user-principal 'alice' are " \
                                      "SCRAM-SHA-256=iterations=8192, SCRAM-SHA-512=iterations=4096\n"
