"""ACLs against a real broker process with Kafka's StandardAuthorizer semantics, judged by third-party clients:
confluent-kafka (librdkafka) and kafka-python create, describe and delete them, and produce, consume, list and create
topics under them.

Over PLAINTEXT every client is User:ANONYMOUS, a principal like any other: the first broker run makes it a super user
to set the ACLs up; the second, on the same data, does not, so what ANONYMOUS may do is exactly what the ACLs (read
back from the metadata log) allow, with `allow.everyone.if.no.acl.found=false`.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kafka import KafkaAdminClient
from kafka.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    ResourcePattern,
    ResourcePatternFilter,
)
from kafka.admin import ResourceType as KpResourceType

from bus.config.broker import STANDARD_AUTHORIZER
from deploy.processes.broker import BrokerProcess

TIMEOUT = 15.0
ANONYMOUS = "User:ANONYMOUS"
ANY_ACL = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                           AclPermissionType.ANY)

# What ANONYMOUS may do once it is no super user: everything on the topics named allowed.* (but read or write
# allowed.readonly, which DENY ACLs override: it may still describe it), read the group readers, and list and change
# the ACLs.
GRANTS = [
    AclBinding(ResourceType.TOPIC, "allowed.", ResourcePatternType.PREFIXED, ANONYMOUS, "*", AclOperation.ALL,
               AclPermissionType.ALLOW),
    AclBinding(ResourceType.TOPIC, "allowed.readonly", ResourcePatternType.LITERAL, ANONYMOUS, "*",
               AclOperation.WRITE, AclPermissionType.DENY),
    AclBinding(ResourceType.TOPIC, "allowed.readonly", ResourcePatternType.LITERAL, ANONYMOUS, "*",
               AclOperation.READ, AclPermissionType.DENY),
    AclBinding(ResourceType.GROUP, "readers", ResourcePatternType.LITERAL, ANONYMOUS, "*", AclOperation.READ,
               AclPermissionType.ALLOW),
    AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, ANONYMOUS, "*",
               AclOperation.ALTER, AclPermissionType.ALLOW),
    AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, ANONYMOUS, "*",
               AclOperation.DESCRIBE, AclPermissionType.ALLOW),
]


def _key(binding: AclBinding) -> tuple[Any, ...]:
    return (binding.restype, binding.name, binding.resource_pattern_type, binding.principal, binding.host,
            binding.operation, binding.permission_type)


def _described(admin: AdminClient) -> set[tuple[Any, ...]]:
    return {_key(b) for b in admin.describe_acls(ANY_ACL, request_timeout=TIMEOUT).result(TIMEOUT)}


def _delivery(producer: Producer, topic: str) -> KafkaError | None:
    """Produce one record and return its error (None: written): from the delivery report, or at once when librdkafka
    already knows the topic is refused (its Metadata answered TOPIC_AUTHORIZATION_FAILED)."""
    outcome: list[KafkaError | None] = []
    try:
        producer.produce(topic, b"value", on_delivery=lambda err, _msg: outcome.append(err))
    except KafkaException as exc:
        return exc.args[0]  # type: ignore[no-any-return]
    producer.flush(TIMEOUT)
    assert outcome, f"no delivery report for {topic}"
    return outcome[0]


def _first_event(consumer: Consumer, topic: str) -> Any:
    """The first record or error the consumer sees for `topic` from its start."""
    consumer.assign([TopicPartition(topic, 0, 0)])
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None:
            return message
    raise AssertionError(f"nothing consumed from {topic}")


def test_acls_are_enforced_for_anonymous_and_survive_a_restart(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", {"authorizer.class.name": STANDARD_AUTHORIZER,
                                               "super.users": ANONYMOUS, "allow.everyone.if.no.acl.found": "false"})
    broker.start()
    try:
        _set_up_as_super_user(broker)
        broker.overrides.pop("super.users")
        broker.restart()
        _enforced(broker)
    finally:
        broker.stop()
    logs = broker.logs()  # denials are logged in Kafka's kafka.authorizer.logger words
    assert ("Principal = User:ANONYMOUS is Denied operation = READ from host = 127.0.0.1 on resource = "
            "Topic:LITERAL:allowed.readonly for request = Fetch") in logs
    assert "on resource = Topic:LITERAL:allowed.readonly for request = Produce" in logs


def _set_up_as_super_user(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topics = [NewTopic(name, 1, 1) for name in ("allowed.orders", "allowed.readonly", "denied.orders")]
    for future in admin.create_topics(topics, operation_timeout=TIMEOUT).values():
        future.result(TIMEOUT)
    for future in admin.create_acls(GRANTS, request_timeout=TIMEOUT).values():
        assert future.result(TIMEOUT) is None
    assert _described(admin) == {_key(b) for b in GRANTS}
    # Created twice: still one ACL, as in Kafka.
    admin.create_acls(GRANTS[:1], request_timeout=TIMEOUT)[GRANTS[0]].result(TIMEOUT)
    assert len(_described(admin)) == len(GRANTS)

    # kafka-python: its own create, filtered describe and delete, on an ACL of another principal.
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10_000)
    try:
        bobs = ACL("User:bob", "10.0.0.9", ACLOperation.READ, ACLPermissionType.ALLOW,
                   ResourcePattern(KpResourceType.TOPIC, "denied.orders", ACLResourcePatternType.LITERAL))
        created = client.create_acls([bobs])
        assert created["failed"] == [] and len(created["succeeded"]) == 1
        bob_filter = ACLFilter("User:bob", None, ACLOperation.ANY, ACLPermissionType.ANY,
                               ResourcePatternFilter(KpResourceType.ANY, None, ACLResourcePatternType.ANY))
        found, error = client.describe_acls(bob_filter)
        assert error.errno == 0 and [(a.principal, a.host, a.resource_pattern.resource_name) for a in found] == [
            ("User:bob", "10.0.0.9", "denied.orders")]
        # MATCH: every ACL that applies to topic allowed.orders (the prefixed grant), whoever it names.
        match = ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                          ResourcePatternFilter(KpResourceType.TOPIC, "allowed.orders", ACLResourcePatternType.MATCH))
        found, _ = client.describe_acls(match)
        assert [(a.resource_pattern.resource_name, a.resource_pattern.pattern_type) for a in found] == [
            ("allowed.", ACLResourcePatternType.PREFIXED)]
        ((_filter, deleted, error),) = client.delete_acls([bob_filter])
        assert error.errno == 0 and [acl.principal for acl in deleted] == ["User:bob"]
    finally:
        client.close()
    assert _described(admin) == {_key(b) for b in GRANTS}


def _enforced(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert _described(admin) == {_key(b) for b in GRANTS}, "the ACLs did not survive the restart"

    # Metadata lists only the topics ANONYMOUS may describe.
    listed = set(admin.list_topics(timeout=TIMEOUT).topics)
    assert {"allowed.orders", "allowed.readonly"} <= listed and "denied.orders" not in listed

    producer = Producer({"bootstrap.servers": broker.bootstrap, "message.timeout.ms": 10_000})
    assert _delivery(producer, "allowed.orders") is None
    refused = _delivery(producer, "denied.orders")
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    readonly = _delivery(producer, "allowed.readonly")  # the DENY wins over the prefixed ALLOW ALL
    assert readonly is not None and readonly.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    created = admin.create_topics([NewTopic("allowed.new", 1, 1), NewTopic("denied.new", 1, 1)],
                                  operation_timeout=TIMEOUT)
    assert created["allowed.new"].result(TIMEOUT) is None
    with pytest.raises(KafkaException) as info:
        created["denied.new"].result(TIMEOUT)
    assert info.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "readers",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        message = _first_event(consumer, "allowed.orders")
        assert message.error() is None and message.value() == b"value"
        message = _first_event(consumer, "allowed.readonly")  # described, so fetched: the Fetch is refused
        assert message.error() is not None and message.error().code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    finally:
        consumer.close()

    # Deleting the DENY lets ANONYMOUS write the topic.
    deny = AclBindingFilter(ResourceType.TOPIC, "allowed.readonly", ResourcePatternType.LITERAL, ANONYMOUS, "*",
                            AclOperation.WRITE, AclPermissionType.DENY)
    deleted = admin.delete_acls([deny], request_timeout=TIMEOUT)[deny].result(TIMEOUT)
    assert [_key(b) for b in deleted] == [_key(GRANTS[1])]
    # A new producer: librdkafka keeps a topic's TOPIC_AUTHORIZATION_FAILED (its partition count set to 0) until its
    # next metadata refresh, so the first producer may refuse the write itself, without asking the broker.
    writer = Producer({"bootstrap.servers": broker.bootstrap, "message.timeout.ms": 10_000})
    assert _delivery(writer, "allowed.readonly") is None
