"""`process.roles=broker` and `process.roles=controller`: KafkaConfig's checks of separate KRaft roles, and what
each role makes of the node (an observer or a voter of the quorum, a broker or not)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bus.broker import broker_quorum
from bus.config.broker import load_broker_config
from bus.config.definitions import ConfigError
from bus.controller.controller import QuorumController
from bus.controller.metadata_log.local_file import MetadataLog
from deploy.cluster import Node, node_command, plan, plan_separate, voters_of

VOTERS = "1@127.0.0.1:9093,2@127.0.0.1:9094,3@127.0.0.1:9095"
CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"


def broker_only(**extra: str) -> dict[str, str]:
    return {"node.id": "4", "process.roles": "broker", "listeners": "PLAINTEXT://127.0.0.1:9092",
            "controller.quorum.voters": VOTERS, "cluster.id": CLUSTER_ID, **extra}


def controller_only(**extra: str) -> dict[str, str]:
    return {"node.id": "1", "process.roles": "controller", "listeners": "CONTROLLER://127.0.0.1:9093",
            "controller.quorum.voters": VOTERS, "cluster.id": CLUSTER_ID, **extra}


def test_a_broker_only_node_observes_the_quorum() -> None:
    config = load_broker_config(broker_only())
    assert config.is_broker and not config.is_voter
    assert broker_quorum.runs_quorum(config) and broker_quorum.takes_metadata(config)
    assert broker_quorum.quorum_config(config).voters == {1, 2, 3}


def test_a_controller_only_node_votes_and_is_no_broker() -> None:
    config = load_broker_config(controller_only())
    assert config.is_voter and not config.is_broker
    assert config.client_listeners == []
    assert broker_quorum.takes_metadata(config)


def test_only_a_lone_combined_voter_makes_its_own_metadata() -> None:
    lone = {"node.id": "1", "controller.quorum.voters": "1@127.0.0.1:9093"}
    assert not broker_quorum.takes_metadata(load_broker_config(lone))
    # One controller-only voter and brokers: the brokers' metadata comes from it, the controller's from them.
    single = controller_only(**{"controller.quorum.voters": "1@127.0.0.1:9093"})
    assert broker_quorum.takes_metadata(load_broker_config(single))
    assert not broker_quorum.runs_quorum(load_broker_config({}))  # `bus broker` with no file: one node, no quorum


@pytest.mark.parametrize("roles", ["broker", "controller"])
def test_separate_roles_need_the_voters(roles: str) -> None:
    settings = broker_only() if roles == "broker" else controller_only()
    del settings["controller.quorum.voters"]
    with pytest.raises(ConfigError, match=rf"process.roles={roles}, controller.quorum.voters must contain"):
        load_broker_config(settings)


def test_a_broker_only_node_must_not_listen_on_a_controller_listener() -> None:
    with pytest.raises(ConfigError, match="must not contain a value appearing in the 'listeners' configuration when "
                                          "running KRaft with just the broker role"):
        load_broker_config(broker_only(listeners="PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"))


def test_a_broker_only_node_needs_controller_listener_names() -> None:
    with pytest.raises(ConfigError, match=r"controller\.listener\.names must contain at least one value"):
        load_broker_config(broker_only(**{"controller.listener.names": ""}))


def test_a_broker_only_node_must_not_be_a_voter() -> None:
    with pytest.raises(ConfigError, match="the node id 2 must not be included in the set of voters"):
        load_broker_config(broker_only(**{"node.id": "2"}))


def test_a_controller_only_node_has_only_controller_listeners() -> None:
    with pytest.raises(ConfigError, match="must only contain KRaft controller listeners"):
        load_broker_config(controller_only(listeners="PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"))


def test_a_controller_only_node_must_be_a_voter() -> None:
    with pytest.raises(ConfigError, match="the node id 7 must be included in the set of voters"):
        load_broker_config(controller_only(**{"node.id": "7"}))


def test_a_controller_only_node_needs_its_controller_listener() -> None:
    with pytest.raises(ConfigError, match=r"controller\.listener\.names must contain at least one value appearing"):
        load_broker_config(controller_only(**{"controller.listener.names": "OTHER"}))


def test_a_controller_only_node_refuses_an_inter_broker_listener_among_its_controller_listeners() -> None:
    with pytest.raises(ConfigError, match=r"must not contain an explicitly set inter\.broker\.listener\.name"):
        load_broker_config(controller_only(**{"inter.broker.listener.name": "CONTROLLER"}))


@pytest.mark.parametrize("settings", [broker_only(), controller_only()])
def test_separate_roles_need_the_cluster_id(settings: dict[str, str], tmp_path: Path) -> None:
    del settings["cluster.id"]
    with pytest.raises(ConfigError, match=r"cluster\.id is required"):
        broker_quorum.quorum_cluster_id(load_broker_config({**settings, "log.dirs": str(tmp_path)}))


def test_a_controller_only_node_never_places_a_replica_on_itself(tmp_path: Path) -> None:
    """Its controller counts only registered brokers as live: with none, a topic cannot be placed anywhere."""
    log = MetadataLog(tmp_path)
    try:
        controller = QuorumController(log, node_id=1, default_partitions=1, default_replication_factor=1,
                                      broker=False)
        assert controller.live_brokers == []
        controller.register_broker(4, [("PLAINTEXT", "127.0.0.1", 9092)], None)
        assert controller.live_brokers == [4]
        combined = QuorumController(MetadataLog(tmp_path / "combined"), node_id=1, default_partitions=1,
                                    default_replication_factor=1)
        assert combined.live_brokers == [1]
        combined.log.close()
    finally:
        log.close()


def test_deploy_cluster_plans_controller_only_voters_and_broker_only_nodes(tmp_path: Path) -> None:
    """The command of each node `python -m deploy.cluster --controllers 3 --brokers 2` starts loads as its role."""
    nodes = plan_separate(3, 2, "127.0.0.1", 9300, tmp_path)
    assert [(n.node_id, n.roles, n.port, n.controller_port) for n in nodes] == [
        (1, "controller", 0, 9302), (2, "controller", 0, 9303), (3, "controller", 0, 9304),
        (4, "broker", 9300, 0), (5, "broker", 9301, 0)]
    voters = "1@127.0.0.1:9302,2@127.0.0.1:9303,3@127.0.0.1:9304"
    assert voters_of(nodes) == voters
    for node in nodes:
        command = node_command(node, nodes, CLUSTER_ID)
        overrides = dict(arg.split("=", 1) for arg in command[command.index("broker") + 1:] if arg != "--override")
        config = load_broker_config(overrides)
        assert config.is_broker == (node.roles == "broker") and config.is_voter == (node.roles == "controller")
        assert overrides["controller.quorum.voters"] == voters
    # A broker added later names the quorum it joins; the combined plan stays as it was.
    added = Node(6, "127.0.0.1", 9310, 0, tmp_path / "node-6", "broker")
    command = node_command(added, [added], CLUSTER_ID, voters=voters)
    assert f"controller.quorum.voters={voters}" in command
    assert all(n.roles == "broker,controller" for n in plan(3, "127.0.0.1", 9300, tmp_path))
