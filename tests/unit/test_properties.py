import pytest

from bus.config.properties import PropertiesError, parse_override, parse_properties

KRAFT_SERVER_PROPERTIES = r"""
# Licensed to the Apache Software Foundation (ASF) ...
############################# Server Basics #############################
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=localhost:9093
listeners=PLAINTEXT://:9092,CONTROLLER://:9093
inter.broker.listener.name=PLAINTEXT
advertised.listeners=PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600
log.dirs=/tmp/kraft-combined-logs
num.partitions=1
num.recovery.threads.per.data.dir=1
offsets.topic.replication.factor=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
log.retention.hours=168
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000
"""


def test_kafka_kraft_file_parses():
    props = parse_properties(KRAFT_SERVER_PROPERTIES)
    assert props["process.roles"] == "broker,controller"
    assert props["listeners"] == "PLAINTEXT://:9092,CONTROLLER://:9093"
    assert props["log.retention.hours"] == "168"
    assert len(props) == 24


def test_java_properties_grammar():
    text = "a = 1\nb:2\nc 3\n! comment\n  # comment\nd=x\\\n   y\ne=tab\\there\nf=\\u0041\ng=\n"
    assert parse_properties(text) == {"a": "1", "b": "2", "c": "3", "d": "xy", "e": "tab\there", "f": "A", "g": ""}


def test_later_key_wins():
    assert parse_properties("a=1\na=2\n") == {"a": "2"}


def test_override():
    assert parse_override("log.dirs=/a=b") == ("log.dirs", "/a=b")
    with pytest.raises(PropertiesError):
        parse_override("novalue")
