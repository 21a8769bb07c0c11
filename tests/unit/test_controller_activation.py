"""The active controller's activation steps (creating the coordinators' topics) over a real three-voter quorum:
a step the controller refuses because too few brokers are up is tried again by the periodic pass until it
succeeds, as Kafka leaves `__consumer_offsets` uncreated until enough brokers have registered."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from bus.controller.controller import ControllerError, QuorumController
from bus.controller.metadata_log.quorum import RaftMetadataLog
from tests.unit.raft.test_controller_quorum import until
from tests.unit.raft.test_raft_driver import Cluster, in_loop


@in_loop
async def test_an_internal_topic_refused_for_lack_of_brokers_is_created_once_they_register() -> None:
    raft = Cluster(3)
    await raft.start()
    try:
        tries: dict[int, list[ErrorCode]] = {}
        controllers: dict[int, QuorumController] = {}
        for node_id, driver in raft.drivers.items():
            controller = QuorumController(RaftMetadataLog(driver, commit_timeout_s=5), node_id, 1, 1,
                                          quorum_voters=3)
            tries[node_id] = []

            def ensure(controller: QuorumController = controller, tried: list[ErrorCode] = tries[node_id]) -> None:
                try:
                    controller.create_internal_topic("__consumer_offsets", 3, 3, {})
                except ControllerError as exc:
                    tried.append(exc.code)
                    raise
                tried.append(ErrorCode.none)

            controller.activation_listeners.append(ensure)
            controllers[node_id] = controller
        leader = await raft.wait_for_leader()
        active = controllers[leader.node_id]
        await until(lambda: tries[leader.node_id], 5)  # run on activation: refused, one broker (itself) is up
        assert tries[leader.node_id] == [ErrorCode.invalid_replication_factor]
        active.fence_expired_brokers()  # the periodic pass tries again: still too few
        assert tries[leader.node_id] == [ErrorCode.invalid_replication_factor] * 2

        for broker in (b for b in controllers if b != leader.node_id):
            active.register_broker(broker, [("PLAINTEXT", "127.0.0.1", 9000 + broker)], None)
        active.fence_expired_brokers()
        await active.log.sync()
        assert tries[leader.node_id][-1] == ErrorCode.none
        topic = active.image.topics["__consumer_offsets"]
        assert all(sorted(s.replicas) == [1, 2, 3] for s in topic.partitions.values())
        active.fence_expired_brokers()
        assert len(tries[leader.node_id]) == 3  # done: not run again
        assert all(not tries[n] for n in controllers if n != leader.node_id)  # only the active controller acts
        await until(lambda: all("__consumer_offsets" in c.image.topics for c in controllers.values()), 5)
    finally:
        await raft.stop()
