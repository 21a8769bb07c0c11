"""`bus acls` (kafka-acls) against a real broker with Kafka's StandardAuthorizer, over PLAINTEXT as the super user
User:ANONYMOUS: what the tool adds, lists and removes is checked against confluent-kafka's view of the ACLs, so the
tool and the native admin client's CreateAcls/DescribeAcls/DeleteAcls agree with a third-party client."""

from __future__ import annotations

import io
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from bus.cli import main
from bus.config.broker import STANDARD_AUTHORIZER
from contracts.processes import ROOT
from deploy.processes.broker import BrokerProcess

TIMEOUT = 15.0
ANY_ACL = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                           AclPermissionType.ANY)


@pytest.fixture(scope="module")
def authorizing_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(tmp_path_factory.mktemp("acls-tool") / "data",
                           {"authorizer.class.name": STANDARD_AUTHORIZER, "super.users": "User:ANONYMOUS"}).start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def acls(authorizing_broker: BrokerProcess, capsys: pytest.CaptureFixture[str]) -> Iterator[Any]:
    """Run `bus acls ...` in this process: (exit code, stdout, stderr). Every ACL is deleted afterwards."""

    def run(*argv: str) -> tuple[int, str, str]:
        code = main(["acls", "--bootstrap-server", authorizing_broker.bootstrap, *argv])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    yield run
    admin = _confluent(authorizing_broker)
    admin.delete_acls([ANY_ACL], request_timeout=TIMEOUT)[ANY_ACL].result(TIMEOUT)


def _confluent(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap, "socket.timeout.ms": 5000})


def _seen(broker: BrokerProcess) -> set[tuple[Any, ...]]:
    admin = _confluent(broker)  # held: a collected client cancels its requests
    bindings = admin.describe_acls(ANY_ACL, request_timeout=TIMEOUT).result(TIMEOUT)
    return {(b.restype, b.name, b.resource_pattern_type, b.principal, b.host, b.operation, b.permission_type)
            for b in bindings}


def test_add_list_and_remove(acls: Any, authorizing_broker: BrokerProcess, monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, _ = acls("--add", "--allow-principal", "User:alice", "--operation", "Read", "--operation", "Write",
                        "--topic", "orders")
    assert code == 0 and out.startswith("Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, "
                                        "patternType=LITERAL)`: \n \t(principal=User:alice, host=*, operation=READ")
    assert acls("--add", "--deny-principal", "User:bob", "--deny-host", "10.0.0.9", "--group", "ops-",
                "--resource-pattern-type", "prefixed")[0] == 0
    topic, group = (ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL), \
        (ResourceType.GROUP, "ops-", ResourcePatternType.PREFIXED)
    read, write = (*topic, "User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW), \
        (*topic, "User:alice", "*", AclOperation.WRITE, AclPermissionType.ALLOW)
    denied = (*group, "User:bob", "10.0.0.9", AclOperation.ALL, AclPermissionType.DENY)
    assert _seen(authorizing_broker) == {read, write, denied}

    assert acls("--list") == (0, (
        "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)`:\n"
        "\t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)\n"
        "\t(principal=User:alice, host=*, operation=WRITE, permissionType=ALLOW)\n\n"
        "Current ACLs for resource `ResourcePattern(resourceType=GROUP, name=ops-, patternType=PREFIXED)`:\n"
        "\t(principal=User:bob, host=10.0.0.9, operation=ALL, permissionType=DENY)\n\n"), "")
    code, out, _ = acls("--list", "--group", "ops-team", "--resource-pattern-type", "match", "--principal", "User:bob")
    assert (code, out.splitlines()[:2]) == (0, [
        "ACLs for principal `User:bob`",
        "Current ACLs for resource `ResourcePattern(resourceType=GROUP, name=ops-, patternType=PREFIXED)`:"])

    assert acls("--remove", "--force", "--allow-principal", "User:alice", "--operation", "Read", "--topic",
                "orders") == (0, "", "")
    assert _seen(authorizing_broker) == {write, denied}
    monkeypatch.setattr("sys.stdin", io.StringIO("n\n"))
    code, out, _ = acls("--remove", "--topic", "orders")
    assert code == 0 and out.startswith("Are you sure you want to delete all ACLs for resource filter")
    assert _seen(authorizing_broker) == {write, denied}  # answered no
    monkeypatch.setattr("sys.stdin", io.StringIO("y\n"))
    assert acls("--remove", "--topic", "orders")[0] == 0
    assert _seen(authorizing_broker) == {denied}


def test_producer_and_consumer_roles(acls: Any, authorizing_broker: BrokerProcess) -> None:
    assert acls("--add", "--allow-principal", "User:app", "--producer", "--consumer", "--idempotent", "--topic",
                "events", "--group", "app")[0] == 0
    operations = {(kind, op) for kind, _, _, principal, _, op, _ in _seen(authorizing_broker)
                  if principal == "User:app"}
    assert operations == {(ResourceType.TOPIC, op) for op in (AclOperation.WRITE, AclOperation.DESCRIBE,
                                                              AclOperation.CREATE, AclOperation.READ)} | \
        {(ResourceType.GROUP, AclOperation.READ), (ResourceType.BROKER, AclOperation.IDEMPOTENT_WRITE)}


def test_acls_made_by_confluent_are_listed(acls: Any, authorizing_broker: BrokerProcess) -> None:
    binding = AclBinding(ResourceType.TRANSACTIONAL_ID, "tx-", ResourcePatternType.PREFIXED, "User:carol", "*",
                         AclOperation.WRITE, AclPermissionType.ALLOW)
    admin = _confluent(authorizing_broker)
    assert admin.create_acls([binding], request_timeout=TIMEOUT)[binding].result(TIMEOUT) is None
    assert acls("--list", "--transactional-id", "tx-", "--resource-pattern-type", "any")[1] == (
        "Current ACLs for resource `ResourcePattern(resourceType=TRANSACTIONAL_ID, name=tx-, patternType=PREFIXED)`:\n"
        "\t(principal=User:carol, host=*, operation=WRITE, permissionType=ALLOW)\n\n")


def test_a_broker_without_an_authorizer_is_one_line_and_exit_1(broker: BrokerProcess) -> None:
    done = subprocess.run([sys.executable, "-m", "bus", "acls", "--bootstrap-server", broker.bootstrap, "--list"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == "Error while executing ACL command : No Authorizer is configured on the broker " \
                          "(SECURITY_DISABLED)\n"


def test_the_tool_reads_command_config(acls: Any, tmp_path: Path) -> None:
    """The --command-config file reaches the admin client: a SASL protocol it cannot use on this PLAINTEXT listener
    is refused in one line, where without the file the same command works."""
    config = tmp_path / "client.properties"
    config.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.username=u\nsasl.password=p\n")
    assert acls("--list")[0] == 0
    code, out, err = acls("--list", "--command-config", str(config))
    assert (code, out) == (1, "") and err.count("\n") == 1 and "does not authenticate with SASL" in err
