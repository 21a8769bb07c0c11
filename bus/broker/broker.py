"""The broker process: wires config, storage, controller, replica manager and network together.

With a quorum of more than one voter, or on a broker-only or controller-only node, the metadata arrives from the
other nodes after start: the node serves once its quorum runs, registers itself with the active controller, and
loads its coordinators once the metadata holds their internal topics (which the active controller creates when it
becomes active). A lone combined voter and a node without a quorum have their whole metadata at construction, as a
single node always had.

Roles (`process.roles`, Kafka's KRaft): a broker-only node observes the quorum (see `broker_quorum`) and is a
broker like any other; a controller-only node votes and serves the controller APIs on its controller listener
only: it has no client listener, never registers as a broker (so it is in no Metadata response and no replica
set), loads no coordinator and has no controlled shutdown.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import inspect
import logging
import threading
import time
from collections.abc import Awaitable
from pathlib import Path

from bus.broker import broker_quorum
from bus.broker.context import BrokerServices
from bus.broker.controller_apis import handlers as controller_handlers
from bus.broker.kafka_apis import KafkaApis
from bus.broker.metrics import BrokerMetrics
from bus.broker.partition_writer import ReplicaPartitionWriter
from bus.broker.producer_ids import ProducerIdManager
from bus.broker.replica_fetcher import FetcherSettings, ReplicaFetcherManager
from bus.broker.replica_manager import HIGH_WATERMARK_CHECKPOINT, ReplicaManager
from bus.broker.replication_quota import ReplicationQuotas
from bus.config.broker import BrokerConfig
from bus.config.topic import effective_topic_configs
from bus.controller.bootstrap import read_bootstrap
from bus.controller.controller import ControllerError, QuorumController
from bus.controller.controller_channel import ControllerChannel, ControllerUnavailable
from bus.controller.image import ImageScramCredentials, ImageView
from bus.coordinator.group.config import GroupConfig
from bus.coordinator.group.consumer.coordinator import ConsumerGroupConfig, ConsumerGroupCoordinator
from bus.coordinator.group.coordinator import GroupCoordinator
from bus.coordinator.group.namespace import GroupNamespace
from bus.coordinator.group.offset_store import OFFSETS_TOPIC, OffsetStore
from bus.coordinator.transaction.coordinator import TransactionCoordinator, TxnConfig
from bus.coordinator.transaction.txn_marker_channel import TxnMarkerChannel
from bus.log.config import LogConfig
from bus.log.manager import LogManager
from bus.log.meta_properties import check_meta_properties
from bus.log.offset_checkpoint import read_offset_checkpoint, write_offset_checkpoint
from bus.network.listener_security import listener_securities
from bus.network.node_security import NO_SECURITY, controller_security, inter_broker_security
from bus.network.socket_server import SocketServer
from bus.protocol import messages
from bus.protocol.topic_partition import TopicPartition
from bus.security.authorizer import StandardAuthorizer

log = logging.getLogger(__name__)

CONTROLLED_SHUTDOWN_UNREACHABLE_TRIES = 3  # controller unreachable this many times in a row: stop without it
CONTROLLED_SHUTDOWN_STEP_HEARTBEATS = 3  # a shutdown heartbeat unanswered for this many intervals: unreachable


async def _stop_step(name: str, step: Awaitable[None]) -> None:
    """One step of the shutdown, named in the log before it is awaited: a broker that hangs on SIGTERM (one did
    once, under CI's load, after its controlled shutdown) shows which step it never finished."""
    log.info("shutdown: stopping %s", name)
    await step


class _Preload:
    """Load every served schema, then move what start-up built out of the collector's sight.

    The schemas, config, indexes and coordinator state loaded at start live as long as the broker; a full
    collection that walks them all again and again stalls the loop (one took ~150 ms in a process with the
    schemas loaded), so they go to the permanent generation (`gc.freeze`, as CPython's docs advise).
    Until it is done the broker serves, but its CPU and the loop's stalls include the loading (about a
    second of CPU): `seconds` (the `bus_schema_preload_seconds` gauge, 0 until then) tells a benchmark or an
    operator when the broker has reached its steady state.
    """

    def __init__(self) -> None:
        self.seconds = 0.0

    def run(self, served: list[tuple[int, int, int]]) -> None:
        started = time.perf_counter()
        loaded = messages.preload(served)
        gc.freeze()
        self.seconds = time.perf_counter() - started
        log.info("%d protocol schemas loaded in %.2f s", loaded, self.seconds)


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.node_id = config.node_id
        self.started_at = time.time()
        quorum = broker_quorum.runs_quorum(config)
        self.clustered = broker_quorum.takes_metadata(config)  # metadata comes from the other nodes
        # TLS and SASL first, before any file is opened: a key store that cannot be read stops the start at once.
        # SCRAM logins read the committed image's credentials.
        self.security = listener_securities(config, ImageScramCredentials(lambda: self.controller.image))
        # How this node dials the other nodes' listeners, built (and its own credentials checked) now too.
        self.inter_broker_security = inter_broker_security(config) if config.is_broker else NO_SECURITY
        self.controller_security = controller_security(config)
        configured_id = broker_quorum.quorum_cluster_id(config) if quorum else None
        if configured_id:  # before the quorum's files are touched: another node's or cluster's data is refused
            for directory in {*config.log_dirs, config.metadata_dir}:
                check_meta_properties(directory, self.node_id, configured_id)
        self.raft = (broker_quorum.build_driver(config, configured_id, self.controller_security) if configured_id
                     else None)
        self.metadata_log = broker_quorum.metadata_log(config, self.raft)
        self.controller = QuorumController(  # opens the log: what is committed is in the image after this
            self.metadata_log,
            node_id=self.node_id,
            default_partitions=int(config["num.partitions"]),
            default_replication_factor=int(config["default.replication.factor"]),
            broker_session_timeout_ms=int(config["broker.session.timeout.ms"]),
            unclean_leader_election=bool(config["unclean.leader.election.enable"]),
            quorum_voters=len(config.quorum_voters),
            broker=config.is_broker,
            bootstrap_records=read_bootstrap(config.metadata_dir),
        )
        if self.clustered:
            assert configured_id is not None
            self.cluster_id = configured_id
            self.controller.activation_listeners.append(
                lambda: self.controller.ensure_cluster_id(lambda: self.cluster_id))
        else:
            broker_quorum.import_local_log(config, self.controller)
            cluster_id = configured_id or broker_quorum.quorum_cluster_id(config)  # as `storage format` gave it
            self.cluster_id = self.controller.ensure_cluster_id(lambda: cluster_id)
        for directory in {*config.log_dirs, config.metadata_dir}:
            check_meta_properties(directory, self.node_id, self.cluster_id)
        static = config.static_topic_defaults()
        self.logs = LogManager(config.log_dirs, LogConfig.from_properties(effective_topic_configs({}, static)))
        self.logs.load_all(self._log_config_for)
        self.channel = None if self.raft is None else ControllerChannel(
            self.node_id, self.raft, self.controller, config.quorum_voters,
            int(config["controller.socket.timeout.ms"]) / 1000.0, self.controller_security)
        self.replicas = ReplicaManager(
            self.node_id, self.logs, static,
            producer_id_expiration_ms=int(config["producer.id.expiration.ms"]),
            fetch_session_slots=int(config["max.incremental.fetch.session.cache.slots"]),
            replica_lag_time_max_ms=int(config["replica.lag.time.max.ms"]),
            quotas=ReplicationQuotas.from_broker(config),
            alter_isr=self.channel.alter_partition if self.channel else None,
            # Until registered (`ControllerChannel`), unless this node is the only voter: then its controller runs
            # in this process, so no earlier incarnation of it can still be registered and leading.
            held=self.raft is not None and config.is_broker and set(config.quorum_voters) != {self.node_id},
            checkpointed_high_watermarks=self._read_high_watermarks(),
        )
        self.replicas.load(self.controller.image)
        self.controller.listeners.append(lambda records: self.replicas.apply(self.controller.image, records))
        self.fetchers: ReplicaFetcherManager | None = None
        if self.channel is not None:  # a node of a quorum: partitions may have followers here and elsewhere
            self.channel.registered_listeners.append(self.replicas.release)
            settings = FetcherSettings.from_broker(config, self.inter_broker_security)
            self.fetchers = ReplicaFetcherManager(settings, self._replication_endpoint,
                                                  self.replicas.quotas.follower)
        self.producer_ids = ProducerIdManager(
            self.controller, remote=self.channel.allocate_producer_ids if self.channel else None)
        self._wire_coordinators(config)
        # The ACLs it checks are the committed image's, read on every check: a snapshot that replaces them counts.
        self.authorizer = StandardAuthorizer.from_config(config, lambda: self.controller.image.acls)
        services = BrokerServices(
            config=config,
            metadata=self.metadata,
            controller=self.controller,
            replicas=self.replicas,
            groups=self.groups,
            consumer_groups=self.consumer_groups,
            transactions=self.transactions,
            producer_ids=self.producer_ids,
            bound_address=lambda listener: self.network.bound.get(listener),
            raft=self.raft,
            controller_channel=self.channel,
            authorizer=self.authorizer,
        )
        self.apis = KafkaApis(services)
        # With a quorum, the controller listener serves KRaft's RPCs and Envelope (whose inner request, forwarded by
        # another node, runs on the client APIs) only; without one it stays as it was.
        listener_apis: dict[str, KafkaApis] = {}
        if self.raft:
            controller_apis = KafkaApis(dataclasses.replace(services, envelope_apis=self.apis), controller_handlers())
            listener_apis = {name: controller_apis for name in config.controller_listener_names}
        self.network = SocketServer(config, self.apis, self.security, listener_apis)
        self.metrics = BrokerMetrics(config, self.apis, self.network)
        if self.authorizer is not None:
            self._count_authorizations(self.authorizer)
        self._tasks: list[asyncio.Task[None]] = []
        self._lifecycle: asyncio.Task[None] | None = None  # registration and heartbeats, on a node of a quorum

    def _count_authorizations(self, authorizer: StandardAuthorizer) -> None:
        """The authorizer's metrics (Kafka's authorization-allowed/denied rates and acls-total-count, as totals)."""
        gauges = self.metrics.collector.gauges
        gauges["bus_authorizer_allowed_total"] = ("Authorization checks allowed since start",
                                                  lambda: authorizer.allowed)
        gauges["bus_authorizer_denied_total"] = ("Authorization checks denied since start", lambda: authorizer.denied)
        gauges["bus_authorizer_acls"] = ("ACLs in the committed metadata", lambda: authorizer.acl_count)

    def _wire_coordinators(self, config: BrokerConfig) -> None:
        """The one place coordinators meet their collaborators (Kafka's BrokerServer does this)."""
        self.metadata = ImageView(self.controller.image, self.node_id, lambda: self.controller.live_brokers,
                                  self.cluster_id)
        writer = ReplicaPartitionWriter(self.replicas)
        namespace = GroupNamespace()  # one group namespace: both protocols see each other's groups through it
        self.groups = GroupCoordinator(
            namespace,
            OffsetStore(writer, self.controller,
                        num_partitions=int(config["offsets.topic.num.partitions"]),
                        replication_factor=int(config["offsets.topic.replication.factor"]),
                        segment_bytes=int(config["offsets.topic.segment.bytes"]),
                        commit_timeout_ms=int(config["offsets.commit.timeout.ms"])),
            GroupConfig.from_broker(config),
        )
        self.consumer_groups = ConsumerGroupCoordinator(ConsumerGroupConfig.from_broker(config), self.metadata,
                                                        namespace)
        self.markers: TxnMarkerChannel | None = None
        if self.channel is not None:  # a node of a quorum: a transaction's partitions may be led by other nodes
            self.markers = TxnMarkerChannel(self.node_id, lambda: self.controller.image, self._replication_endpoint,
                                            int(config["request.timeout.ms"]) / 1000, self.inter_broker_security)
        self.transactions = TransactionCoordinator(TxnConfig.from_broker(config), writer, self.controller,
                                                   self.metadata, self.producer_ids, self.markers)
        self.transactions.completion_listeners.append(self.groups.complete_transaction)
        # Coordinators follow leadership of their topics' partitions: load on election, unload on resignation.
        self.replicas.leadership_listeners += [self.groups.loads.on_leadership, self.transactions.loads.on_leadership]
        if self.clustered:  # the active controller creates the coordinators' topics; they load after start
            self.controller.activation_listeners += [self.groups.store.ensure_topic, self.transactions.topic.ensure]
        else:
            self.transactions.load()
        self.controller.listeners.append(
            lambda records: self.groups.on_metadata(records, set(self.metadata.topics)))

    def _replication_endpoint(self, broker_id: int) -> tuple[str, int] | None:
        """Where followers fetch from a leader: its registered endpoint on the inter-broker listener
        (`inter.broker.listener.name`, else the one `security.inter.broker.protocol` names, as in Kafka)."""
        registration = self.controller.image.brokers.get(broker_id)
        if registration is None:
            return None
        return registration.endpoint(self.config.inter_broker_listener)

    def _read_high_watermarks(self) -> dict[TopicPartition, int]:
        """The high watermarks the last run checkpointed (Kafka's replication-offset-checkpoint per log dir)."""
        found: dict[TopicPartition, int] = {}
        for directory in self.config.log_dirs:
            path = directory / HIGH_WATERMARK_CHECKPOINT
            if path.exists():
                found.update(read_offset_checkpoint(path))
        return found

    async def checkpoint_high_watermarks(self) -> None:
        """Write every partition's high watermark to its log dir's checkpoint, taken on the loop and written
        (with its fsyncs) in a worker thread."""
        by_dir: dict[Path, dict[TopicPartition, int]] = {directory: {} for directory in self.config.log_dirs}
        for tp, partition in self.replicas.partitions.items():
            by_dir.setdefault(partition.log.directory.parent, {})[tp] = partition.high_watermark
        for directory, offsets in by_dir.items():
            await asyncio.to_thread(write_offset_checkpoint, directory / HIGH_WATERMARK_CHECKPOINT, offsets)

    def _log_config_for(self, topic: str) -> LogConfig:
        image = self.controller.image.topics.get(topic)
        configs = image.configs if image else {}
        return LogConfig.from_properties(effective_topic_configs(configs, self.config.static_topic_defaults()))

    async def start(self) -> None:
        if not self.clustered:
            await self.groups.start()  # loads __consumer_offsets before the first request can ask
        self.replicas.serving = True
        await self.network.start()
        if self.raft:
            await self.raft.start()
        lifecycle: list[asyncio.Task[None]] = []
        if self.channel is not None:
            heartbeat_s = int(self.config["broker.heartbeat.interval.ms"]) / 1000.0
            lifecycle = [asyncio.create_task(self._every(heartbeat_s / 2, self.controller.fence_expired_brokers))]
            if self.config.is_broker:
                self._lifecycle = asyncio.create_task(
                    self.channel.run_lifecycle(self.cluster_id, self._endpoints(), None, heartbeat_s))
                lifecycle.append(self._lifecycle)
            if self.config["auto.leader.rebalance.enable"]:  # only the active controller acts on it
                imbalance = int(self.config["leader.imbalance.per.broker.percentage"])
                lifecycle.append(asyncio.create_task(self._every(
                    int(self.config["leader.imbalance.check.interval.seconds"]),
                    lambda: self.controller.balance_leaders(imbalance))))
        if self.clustered and self.config.is_broker:
            await self._await_coordinator_topics()
            await self.groups.start()
            self.transactions.load()
        self.metrics.start()
        served = [(h.api_key, h.min_version, h.max_version) for h in self.apis.handlers.values()]
        preload = _Preload()
        self.metrics.collector.gauges["bus_schema_preload_seconds"] = (
            "How long loading the protocol schemas at start took; 0 while it runs", lambda: preload.seconds)
        threading.Thread(target=preload.run, args=(served,), name="bus-schema-preload", daemon=True).start()
        # Disk work runs in worker threads (retention's unlinks, the flusher's fsyncs) or hops to them
        # (producer snapshots), so the event loop never waits for the disk.
        expiry_check_s = int(self.config["producer.id.expiration.check.interval.ms"]) / 1000.0
        self._tasks = [
            asyncio.create_task(self._every(self.config.retention_check_interval_s,
                                            lambda: asyncio.to_thread(self.logs.enforce_retention))),
            asyncio.create_task(self._every(1.0, lambda: asyncio.to_thread(self.logs.flush_dirty,
                                                                           int(time.time() * 1000)))),
            asyncio.create_task(self._every(30.0, self.replicas.snapshot_producers)),
            asyncio.create_task(self._every(expiry_check_s, self.replicas.remove_expired_producers)),
        ]
        self._tasks += lifecycle
        if self.fetchers is not None:
            self.replicas.start_fetching(self.fetchers)
            lag_check_s = int(self.config["replica.lag.time.max.ms"]) / 2000.0
            checkpoint_s = int(self.config["replica.high.watermark.checkpoint.interval.ms"]) / 1000.0
            self._tasks += [asyncio.create_task(self._every(lag_check_s, self.replicas.shrink_isrs)),
                            asyncio.create_task(self._every(checkpoint_s, self.checkpoint_high_watermarks))]
            fetchers = self.fetchers
            self.metrics.collector.gauges["bus_replica_fetcher_max_lag"] = (
                "Largest number of records a follower partition here is behind its leader", fetchers.max_lag)
        quotas = self.replicas.quotas
        self.metrics.collector.gauges["bus_leader_replication_throttled_byte_rate"] = (
            "Bytes/s this leader sent for throttled partitions (leader.replication.throttled.rate bounds it)",
            quotas.leader.measured_rate)
        self.metrics.collector.gauges["bus_follower_replication_throttled_byte_rate"] = (
            "Bytes/s this follower fetched for throttled partitions (follower.replication.throttled.rate bounds it)",
            quotas.follower.measured_rate)
        self.metrics.collector.gauges["bus_under_replicated_partitions"] = (
            "Partitions led here whose ISR is smaller than their replica set", self.replicas.under_replicated)
        self.transactions.start()
        if self.config["log.cleaner.enable"]:
            backoff = int(self.config["log.cleaner.backoff.ms"]) / 1000.0
            self._tasks.append(asyncio.create_task(self._clean_forever(backoff)))

    def _endpoints(self) -> list[tuple[str, str, int]]:
        """This broker's client endpoints as it registers them (an ephemeral port as the OS bound it)."""
        endpoints = []
        for listener in self.config.advertised_client_listeners:
            port = listener.port or (self.network.bound.get(listener.name) or (listener.host, 0))[1]
            endpoints.append((listener.name, listener.host, port))
        return endpoints

    async def _await_coordinator_topics(self) -> None:
        """Wait until the committed metadata holds the coordinators' topics and their local logs exist."""
        needed = (OFFSETS_TOPIC, self.transactions.topic.name)
        polls = 0
        while not all(name in self.controller.image.topics for name in needed):
            if polls % 200 == 0:  # every 10 s
                log.info("waiting for the metadata log to hold %s", ", ".join(needed))
            polls += 1
            await asyncio.sleep(0.05)
        await self.replicas.settled()

    async def _every(self, interval: float, work: object) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                result = work()  # type: ignore[operator]
                if inspect.isawaitable(result):
                    await result
            except Exception:
                log.exception("scheduled task %s failed", work)

    async def _clean_forever(self, backoff: float) -> None:
        """Compaction runs in a worker thread so a large clean never stalls the event loop."""
        while True:
            await asyncio.sleep(backoff)
            try:
                await asyncio.to_thread(self.logs.clean_compacted)
            except Exception:
                log.exception("log cleaner pass failed")

    async def _controlled_shutdown(self) -> None:
        """Hand this broker's leaderships and ISR memberships to the other replicas before stopping (KRaft's
        controlled shutdown: heartbeats asking to shut down until the controller says this broker leads nothing),
        so acks=all producers and consumers move to the new leaders instead of waiting out a session timeout.
        Bounded by `controlled.shutdown.timeout.ms`: a cluster without an active controller cannot answer.

        A broker with nothing to hand over still asks, once and for one heartbeat interval at most: the controller
        fences it at once, so its next incarnation may register as soon as it starts instead of being refused until
        this one's session expires (and the other brokers meanwhile list a broker that is gone). It does not wait
        for a quorum that is going down with it (`make down` stops every node at once)."""
        assert self.channel is not None
        if self._lifecycle is not None:
            self._lifecycle.cancel()  # its ordinary heartbeats would not ask to shut down
        interval_s = int(self.config["broker.heartbeat.interval.ms"]) / 1000.0
        if not any(p.is_leader and len(p.isr) > 1 for p in self.replicas.partitions.values()):
            try:
                async with asyncio.timeout(interval_s):
                    await self.channel.request_shutdown()
            except (ControllerUnavailable, TimeoutError, ControllerError) as exc:
                log.info("controlled shutdown step not taken: %s", getattr(exc, "message", None) or exc
                         or "no controller answered in time")
            return
        deadline = time.monotonic() + int(self.config["controlled.shutdown.timeout.ms"]) / 1000.0
        unreachable = 0
        while time.monotonic() < deadline and unreachable < CONTROLLED_SHUTDOWN_UNREACHABLE_TRIES:
            try:
                # One step waits a few heartbeats at most, not a whole request timeout: when every node of a
                # cluster is stopped at once, the last ones find the quorum gone and would each wait 30 s for it.
                step_s = max(CONTROLLED_SHUTDOWN_STEP_HEARTBEATS * interval_s, 1.0)
                async with asyncio.timeout(max(min(deadline - time.monotonic(), step_s), 0.1)):
                    if await self.channel.request_shutdown():
                        log.info("controlled shutdown: broker %d leads no partition any more", self.node_id)
                        return
                unreachable = 0
            except (ControllerUnavailable, TimeoutError) as exc:
                unreachable += 1  # the quorum may be gone with the rest of the cluster: do not wait for ever
                log.info("controlled shutdown step not taken: %s", exc or "no controller answered in time")
            except ControllerError as exc:
                log.info("controlled shutdown step refused: %s", exc.message)
            await asyncio.sleep(interval_s)
        log.warning("controlled shutdown did not finish (no active controller, or controlled.shutdown.timeout.ms "
                    "passed); stopping anyway")

    async def stop(self) -> None:
        if (self.clustered and self.channel is not None and self.config.is_broker
                and self.config["controlled.shutdown.enable"]):
            await self._controlled_shutdown()
        for task in self._tasks:
            task.cancel()
        self.transactions.stop()
        self.consumer_groups.stop()
        if self.markers is not None:
            await _stop_step("the transaction marker channel", self.markers.close())
        if self.channel is not None:
            await _stop_step("the controller channel", self.channel.close())
        if self.fetchers is not None:
            await _stop_step("the replica fetchers", self.fetchers.close())
        if self.raft:  # first: a leader resigns while its connections still work
            await _stop_step("the raft driver", self.raft.stop())
        await _stop_step("the network", self.network.stop())
        self.metrics.stop()
        await _stop_step("the group coordinator", self.groups.stop())
        await _stop_step("the producer snapshots", self.replicas.snapshot_producers(force=True))
        await _stop_step("the high watermark checkpoint", self.checkpoint_high_watermarks())
        await _stop_step("the log's background work", self.replicas.drain_background())
        self.logs.close()
        self.metadata_log.close()
        log.info("broker %d shut down cleanly", self.node_id)
