"""`bus features describe` and `--version` against a broker process.

The features printed must be exactly those the broker's ApiVersions v3 answer carries, read here with a raw
kio-decoded request rather than through our admin client. `--version` prints the installed package's version
on `bus` and on the sub-commands whose Kafka tool has the flag, and is refused where Kafka's is absent.
"""

from __future__ import annotations

import importlib.metadata

import pytest

from deploy.processes.broker import BrokerProcess
from testkit.raw_kafka import RawKafka, api_versions_request
from tests.integration._support_tools import bus, ok


def test_describe_prints_the_advertised_features(shared_broker: BrokerProcess) -> None:
    with RawKafka(shared_broker.bootstrap) as raw:
        answer = raw.request(api_versions_request())
    epoch = "-" if answer.finalized_features_epoch < 0 else str(answer.finalized_features_epoch)
    finalized = {f.name: f.max_version_level for f in answer.finalized_features}
    expected = [f"Feature: {f.name}\tSupportedMinVersion: {f.min_version}\tSupportedMaxVersion: {f.max_version}\t"
                f"FinalizedVersionLevel: {finalized.get(f.name, 0)}\tEpoch: {epoch}"
                for f in sorted(answer.supported_features, key=lambda f: f.name)]
    result = bus("features", "--bootstrap-server", shared_broker.bootstrap, "describe")
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.splitlines() == expected  # today: none, as the broker versions no feature


def test_describe_needs_a_server_and_an_action(shared_broker: BrokerProcess) -> None:
    result = bus("features", "--bootstrap-server", shared_broker.bootstrap)
    assert result.returncode == 1 and "error: the following arguments are required: {describe}" in result.stderr
    result = bus("features", "--bootstrap-server", "127.0.0.1:1", "describe")
    assert result.returncode == 1 and result.stderr.startswith("Error while executing features command : ")
    assert len(result.stderr.strip().splitlines()) == 1


VERSION = importlib.metadata.version("securitybus")


@pytest.mark.parametrize("command", ["delete-records", "log-dirs", "dump-log", "get-offsets", "transactions"])
def test_version_on_subcommands(command: str) -> None:
    assert ok(bus(command, "--version")).strip() == VERSION


def test_version_on_bus_and_not_where_kafka_has_none() -> None:
    assert ok(bus("--version")).strip() == VERSION
    result = bus("storage", "--version")
    assert result.returncode == 1 and "Traceback" not in result.stderr
