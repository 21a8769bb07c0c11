"""The broker's own configuration: `server.properties` keys, defaults and validation.

`bus broker` with no file must run a single-node combined broker+controller, so every key here
has a default that works on one machine. A KRaft combined-mode `server.properties` from Apache Kafka
loads unchanged; keys we do not know are kept and reported once (as Kafka warns), never fatal.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bus.config.definitions import INT_MAX, LONG_MAX, ConfigDef, ConfigError, ConfigKey, ConfigType
from bus.config.topic import TOPIC_SYNONYMS

_T = ConfigType

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")

# `authorizer.class.name` of the one authorizer there is (bus.security.authorizer), as Kafka's KRaft brokers name it.
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"

# The broker configs that IncrementalAlterConfigs / AlterConfigs may change at run time (Kafka's
# DynamicConfig.Broker quota keys), per broker or as the cluster-wide default (resource name "").
DYNAMIC_BROKER_KEYS = ("leader.replication.throttled.rate", "follower.replication.throttled.rate",
                       "replica.alter.log.dirs.io.max.bytes.per.second")

BROKER_CONFIGS = ConfigDef(
    [
        ConfigKey("node.id", _T.INT, "1", "This node's id in the cluster.", at_least=0),
        ConfigKey("broker.id", _T.INT, None, "Legacy alias of node.id.", at_least=-1),
        ConfigKey("process.roles", _T.LIST, "broker,controller", "broker, controller or both.",
                  one_of=("broker", "controller")),
        ConfigKey("controller.quorum.voters", _T.LIST, "", "id@host:port of each controller."),
        ConfigKey("controller.quorum.bootstrap.servers", _T.LIST, "", "host:port of controllers."),
        # KRaft's timings (QuorumConfig.java's names and defaults).
        ConfigKey("controller.quorum.election.timeout.ms", _T.INT, "1000",
                  "Without a leader, a voter waits a random time in [t, 2t) before asking for votes.", at_least=1),
        ConfigKey("controller.quorum.fetch.timeout.ms", _T.INT, "2000",
                  "A follower without a successful fetch for this long becomes a candidate.", at_least=1),
        ConfigKey("controller.quorum.election.backoff.max.ms", _T.INT, "1000",
                  "Cap of the exponential backoff between elections.", at_least=0),
        ConfigKey("controller.quorum.request.timeout.ms", _T.INT, "2000",
                  "A quorum request without a response for this long is given up and retried.", at_least=1),
        ConfigKey("controller.quorum.retry.backoff.ms", _T.INT, "20",
                  "Pause before a failed quorum request is retried.", at_least=0),
        # A broker's session with the active controller (Kafka's names and defaults).
        ConfigKey("broker.heartbeat.interval.ms", _T.INT, "2000",
                  "How often a broker heartbeats to the active controller.", at_least=1),
        ConfigKey("broker.session.timeout.ms", _T.INT, "9000",
                  "A broker without a heartbeat for this long is fenced (left out of Metadata and placements).",
                  at_least=1),
        # Partition replication (Kafka's names and defaults).
        ConfigKey("replica.lag.time.max.ms", _T.LONG, "30000",
                  "A follower that has not caught up with the leader's log end for this long leaves the ISR.",
                  at_least=1),
        ConfigKey("replica.fetch.wait.max.ms", _T.INT, "500", "Longest wait of a follower's fetch.", at_least=0),
        ConfigKey("replica.fetch.min.bytes", _T.INT, "1", "Bytes a follower's fetch waits for.", at_least=1),
        ConfigKey("replica.fetch.max.bytes", _T.INT, "1048576", "Bytes a follower fetches per partition.",
                  at_least=0),
        ConfigKey("replica.fetch.response.max.bytes", _T.INT, "10485760", "Bytes per follower fetch response.",
                  at_least=0),
        ConfigKey("replica.fetch.backoff.ms", _T.INT, "1000", "Pause after a follower's fetch failed.", at_least=0),
        ConfigKey("replica.socket.timeout.ms", _T.INT, "30000", "Timeout of a follower's fetch requests.",
                  at_least=1),
        ConfigKey("replica.high.watermark.checkpoint.interval.ms", _T.LONG, "5000",
                  "How often high watermarks are written to replication-offset-checkpoint.", at_least=1),
        ConfigKey("num.replica.fetchers", _T.INT, "1", "Fetcher connections per source broker.", at_least=1),
        # Replication quotas (Kafka's ReplicationQuotaManager): the rates are dynamic (DYNAMIC_BROKER_KEYS).
        ConfigKey("leader.replication.throttled.rate", _T.LONG, str(LONG_MAX),
                  "Bytes/s a leader sends to out-of-sync replicas of throttled partitions.", at_least=0),
        ConfigKey("follower.replication.throttled.rate", _T.LONG, str(LONG_MAX),
                  "Bytes/s a follower fetches for its out-of-sync throttled partitions.", at_least=0),
        ConfigKey("replica.alter.log.dirs.io.max.bytes.per.second", _T.LONG, str(LONG_MAX),
                  "Bytes/s of replica moves between log dirs (stored; such moves are not supported).", at_least=0),
        ConfigKey("replication.quota.window.num", _T.INT, "11", "Samples a replication quota's rate spans.",
                  at_least=1),
        ConfigKey("replication.quota.window.size.seconds", _T.INT, "1", "Length of one replication quota sample.",
                  at_least=1),
        ConfigKey("auto.leader.rebalance.enable", _T.BOOLEAN, "true",
                  "Move leadership back to preferred replicas when the imbalance passes the threshold."),
        ConfigKey("leader.imbalance.check.interval.seconds", _T.LONG, "300", "Rebalance check period.",
                  at_least=1),
        ConfigKey("leader.imbalance.per.broker.percentage", _T.INT, "10",
                  "Share of a broker's partitions not led by it that triggers a rebalance.", at_least=0),
        ConfigKey("controlled.shutdown.enable", _T.BOOLEAN, "true",
                  "On SIGTERM, move this broker's leaderships to other replicas before stopping."),
        ConfigKey("controlled.shutdown.timeout.ms", _T.LONG, "30000",
                  "Longest wait for the controller to move leaderships away at shutdown.", at_least=0),
        ConfigKey("controller.socket.timeout.ms", _T.INT, "30000",
                  "Timeout of a broker's requests to the active controller (forwarded admin requests, ...).",
                  at_least=1),
        ConfigKey("listeners", _T.LIST, "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
                  "Listener URIs name://host:port."),
        ConfigKey("advertised.listeners", _T.LIST, None, "Listeners handed to clients."),
        ConfigKey("controller.listener.names", _T.LIST, "CONTROLLER", "Listeners used by controllers."),
        ConfigKey("listener.security.protocol.map", _T.LIST,
                  "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,"
                  "SASL_SSL:SASL_SSL", "Listener name to security protocol."),
        ConfigKey("inter.broker.listener.name", _T.STRING, None, "Listener brokers talk on."),
        ConfigKey("security.inter.broker.protocol", _T.STRING, "PLAINTEXT", "Security protocol between brokers, "
                  "naming the inter-broker listener when inter.broker.listener.name is unset.",
                  one_of=SECURITY_PROTOCOLS),
        ConfigKey("authorizer.class.name", _T.STRING, "", "The authorizer checking every request against the ACLs: "
                  f"{STANDARD_AUTHORIZER}, or empty for none (every request is allowed).",
                  one_of=("", STANDARD_AUTHORIZER)),
        ConfigKey("super.users", _T.STRING, "", "Principals the authorizer allows everything, separated by "
                  "semicolons (User:admin;User:ANONYMOUS)."),
        ConfigKey("allow.everyone.if.no.acl.found", _T.BOOLEAN, "false",
                  "Whether the authorizer allows an operation on a resource no ACL's pattern matches."),
        ConfigKey("log.dirs", _T.LIST, None, "Directories holding partition logs."),
        ConfigKey("log.dir", _T.STRING, "data/bus", "Log directory when log.dirs is unset."),
        ConfigKey("metadata.log.dir", _T.STRING, None, "Directory of the metadata log."),
        # When a quorum node snapshots its committed metadata image (Kafka's names, defaults and docs).
        ConfigKey("metadata.log.max.record.bytes.between.snapshots", _T.LONG, "20971520",
                  "This is the maximum number of bytes in the log between the latest snapshot and the high-watermark "
                  "needed before generating a new snapshot. The Kafka node will generate a snapshot when either the "
                  "maximum time interval is reached or the maximum bytes limit is reached.", at_least=1),
        ConfigKey("metadata.log.max.snapshot.interval.ms", _T.LONG, "3600000",
                  "This is the maximum number of milliseconds to wait to generate a snapshot if there are committed "
                  "records in the log that are not included in the latest snapshot. A value of zero disables time "
                  "based snapshot generation.", at_least=0),
        # How much metadata log history a quorum node keeps behind its snapshots (Kafka's names, defaults and docs).
        ConfigKey("metadata.max.retention.bytes", _T.LONG, "104857600",
                  "The maximum combined size of the metadata log and snapshots before deleting old snapshots and "
                  "log files. Since at least one snapshot must exist before any logs can be deleted, this is a soft "
                  "limit."),
        ConfigKey("metadata.max.retention.ms", _T.LONG, "604800000",
                  "The number of milliseconds to keep a metadata log file or snapshot before deleting it. Since at "
                  "least one snapshot must exist before any logs can be deleted, this is a soft limit."),
        ConfigKey("num.partitions", _T.INT, "1", "Partitions of auto-created topics.", at_least=1),
        ConfigKey("default.replication.factor", _T.INT, "1", "Replicas of auto-created topics.", at_least=1),
        ConfigKey("min.insync.replicas", _T.INT, "1", "Replicas that must ack acks=all.", at_least=1),
        ConfigKey("auto.create.topics.enable", _T.BOOLEAN, "true", "Create topics on first use."),
        ConfigKey("delete.topic.enable", _T.BOOLEAN, "true", "Allow DeleteTopics."),
        ConfigKey("message.max.bytes", _T.INT, "1048588", "Largest record batch.", at_least=0),
        ConfigKey("compression.type", _T.STRING, "producer", "Final compression of topics.",
                  one_of=("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")),
        ConfigKey("log.segment.bytes", _T.INT, "1073741824", "Segment size.", at_least=14 * 1024),
        ConfigKey("log.roll.ms", _T.LONG, None, "Roll segments after this long."),
        ConfigKey("log.roll.hours", _T.INT, "168", "Roll segments after this long.", at_least=1),
        ConfigKey("log.roll.jitter.ms", _T.LONG, None, "Jitter on segment roll."),
        ConfigKey("log.roll.jitter.hours", _T.INT, "0", "Jitter on segment roll.", at_least=0),
        ConfigKey("log.retention.ms", _T.LONG, None, "Retention time (-1 unlimited)."),
        ConfigKey("log.retention.minutes", _T.INT, None, "Retention time in minutes."),
        ConfigKey("log.retention.hours", _T.INT, "168", "Retention time in hours."),
        ConfigKey("log.retention.bytes", _T.LONG, "-1", "Retention size per partition."),
        ConfigKey("log.retention.check.interval.ms", _T.LONG, "300000", "Retention check period.",
                  at_least=1),
        ConfigKey("log.cleanup.policy", _T.LIST, "delete", "delete and/or compact.",
                  one_of=("delete", "compact")),
        ConfigKey("log.cleaner.enable", _T.BOOLEAN, "true", "Run the log cleaner."),
        ConfigKey("log.cleaner.backoff.ms", _T.LONG, "15000", "Cleaner sleep when idle.", at_least=0),
        ConfigKey("log.cleaner.threads", _T.INT, "1", "Cleaner threads.", at_least=0),
        ConfigKey("log.cleaner.delete.retention.ms", _T.LONG, "86400000", "Tombstone retention."),
        ConfigKey("log.cleaner.min.compaction.lag.ms", _T.LONG, "0", "Minimum compaction lag."),
        ConfigKey("log.cleaner.max.compaction.lag.ms", _T.LONG, str(LONG_MAX), "Maximum compaction lag."),
        ConfigKey("log.cleaner.min.cleanable.ratio", _T.DOUBLE, "0.5", "Dirty ratio to clean."),
        ConfigKey("log.flush.interval.messages", _T.LONG, str(LONG_MAX), "fsync every N messages.",
                  at_least=1),
        ConfigKey("log.flush.interval.ms", _T.LONG, None, "fsync every N ms."),
        ConfigKey("log.flush.scheduler.interval.ms", _T.LONG, str(LONG_MAX), "Flush check period."),
        ConfigKey("log.flush.offset.checkpoint.interval.ms", _T.INT, "60000", "Recovery point period."),
        ConfigKey("log.index.interval.bytes", _T.INT, "4096", "Bytes between index entries."),
        ConfigKey("log.index.size.max.bytes", _T.INT, "10485760", "Offset index size."),
        ConfigKey("log.message.timestamp.type", _T.STRING, "CreateTime", "CreateTime or LogAppendTime.",
                  one_of=("CreateTime", "LogAppendTime")),
        ConfigKey("log.segment.delete.delay.ms", _T.LONG, "60000", "Delay before file deletion."),
        ConfigKey("log.preallocate", _T.BOOLEAN, "false", "Preallocate segments."),
        ConfigKey("num.network.threads", _T.INT, "3", "Accepted for compatibility (one event loop).",
                  at_least=1),
        ConfigKey("num.io.threads", _T.INT, "8", "Accepted for compatibility.", at_least=1),
        ConfigKey("num.recovery.threads.per.data.dir", _T.INT, "2", "Accepted for compatibility."),
        ConfigKey("socket.send.buffer.bytes", _T.INT, "102400", "SO_SNDBUF (-1: OS default)."),
        ConfigKey("socket.receive.buffer.bytes", _T.INT, "102400", "SO_RCVBUF (-1: OS default)."),
        ConfigKey("socket.request.max.bytes", _T.INT, "104857600", "Largest request frame.", at_least=1),
        ConfigKey("connections.max.idle.ms", _T.LONG, "600000", "Close connections idle this long."),
        ConfigKey("queued.max.requests", _T.INT, "500", "Requests read and not yet answered, broker-wide; "
                  "connections stop being read while this many wait.", at_least=1),
        # Kafka's default is -1 (unbounded); ours bounds request memory by default. Admission is checked at
        # frame boundaries, so one frame up to socket.request.max.bytes always fits (Kafka's pool is non-strict).
        ConfigKey("queued.max.request.bytes", _T.LONG, "104857600", "Bytes of requests read and not yet "
                  "answered, broker-wide (-1: unbounded)."),
        ConfigKey("max.connections", _T.INT, str(INT_MAX), "Connections the broker accepts; more are closed.",
                  at_least=0),
        ConfigKey("max.connections.per.ip", _T.INT, str(INT_MAX), "Connections from one address; more are "
                  "closed.", at_least=0),
        # TLS and SASL at the listeners (Kafka's SslConfigs / BrokerSecurityConfigs / SaslConfigs names and defaults;
        # bus.security reads them per listener, `listener.name.<listener>.<key>` first). Only PEM stores work here.
        ConfigKey("ssl.protocol", _T.STRING, "TLSv1.3", "Newest TLS version (TLS: no cap)."),
        ConfigKey("ssl.enabled.protocols", _T.LIST, "TLSv1.2,TLSv1.3", "TLS versions a connection may use."),
        ConfigKey("ssl.cipher.suites", _T.LIST, "", "Cipher suites (IANA or OpenSSL names; empty: the defaults)."),
        ConfigKey("ssl.keystore.type", _T.STRING, "JKS", "Key store format; only PEM is supported."),
        ConfigKey("ssl.keystore.location", _T.STRING, None, "PEM file: private key and certificate chain."),
        ConfigKey("ssl.keystore.password", _T.PASSWORD, None, "JKS/PKCS12 store password (not for PEM).",
                  sensitive=True),
        ConfigKey("ssl.key.password", _T.PASSWORD, None, "Password of the encrypted private key.", sensitive=True),
        ConfigKey("ssl.keystore.key", _T.PASSWORD, None, "Inline PEM private key.", sensitive=True),
        ConfigKey("ssl.keystore.certificate.chain", _T.PASSWORD, None, "Inline PEM certificate chain.",
                  sensitive=True),
        ConfigKey("ssl.truststore.type", _T.STRING, "JKS", "Trust store format; only PEM is supported."),
        ConfigKey("ssl.truststore.location", _T.STRING, None, "PEM file of trusted CA certificates."),
        ConfigKey("ssl.truststore.password", _T.PASSWORD, None, "JKS/PKCS12 store password (not for PEM).",
                  sensitive=True),
        ConfigKey("ssl.truststore.certificates", _T.PASSWORD, None, "Inline PEM trusted certificates.",
                  sensitive=True),
        ConfigKey("ssl.client.auth", _T.STRING, "none", "Ask SSL clients for certificates (SASL_SSL listeners: "
                  "only when listener-prefixed).", one_of=("required", "requested", "none")),
        ConfigKey("ssl.endpoint.identification.algorithm", _T.STRING, "https",
                  "Check the server's host name (https) or not (empty), when this broker connects as a client."),
        ConfigKey("ssl.principal.mapping.rules", _T.STRING, "DEFAULT",
                  "RULE:pattern/replacement/[LU] rules mapping a client certificate's DN to a user name."),
        ConfigKey("sasl.enabled.mechanisms", _T.LIST, "GSSAPI",
                  "SASL mechanisms a listener offers (PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 are supported)."),
        ConfigKey("sasl.mechanism.inter.broker.protocol", _T.STRING, "GSSAPI", "SASL mechanism between brokers."),
        ConfigKey("sasl.mechanism.controller.protocol", _T.STRING, "GSSAPI",
                  "SASL mechanism on the controller listener."),
        ConfigKey("connections.max.reauth.ms", _T.LONG, "0", "Lifetime of an authenticated SASL session (KIP-368): "
                  "the client must re-authenticate within it or its connection is closed; 0: no limit."),
        ConfigKey("connection.failed.authentication.delay.ms", _T.INT, "100",
                  "How long the answer to a failed authentication, and the close, are held back.", at_least=0),
        ConfigKey("sasl.jaas.config", _T.PASSWORD, None, "JAAS login module; a broker reads it only as "
                  "listener.name.<listener>.<mechanism>.sasl.jaas.config.", sensitive=True),
        ConfigKey("sasl.server.max.receive.size", _T.INT, "524288",
                  "Largest SASL token read before a connection is authenticated."),
        # Our own keys (Kafka exports metrics over JMX and has no equivalent): prefixed bus.
        ConfigKey("bus.metrics.listener", _T.STRING, "", "host:port of the Prometheus /metrics endpoint "
                  "(port 0: any free port; empty: off)."),
        ConfigKey("bus.ssl.handshake.timeout.ms", _T.LONG, "10000", "A TLS handshake not finished in this long "
                  "closes the connection (Kafka has no such bound besides connections.max.idle.ms).", at_least=1),
        ConfigKey("bus.event.loop.stall.log.ms", _T.LONG, "100", "Log event loop stalls longer than this.",
                  at_least=1),
        ConfigKey("offsets.topic.replication.factor", _T.SHORT, "3", "__consumer_offsets replicas."),
        ConfigKey("offsets.topic.num.partitions", _T.INT, "50", "__consumer_offsets partitions.",
                  at_least=1),
        ConfigKey("offsets.retention.minutes", _T.INT, "10080", "Committed offset retention.", at_least=1),
        ConfigKey("offsets.retention.check.interval.ms", _T.LONG, "600000", "Offset expiry check period.",
                  at_least=1),
        ConfigKey("offsets.topic.segment.bytes", _T.INT, "104857600", "__consumer_offsets segment size.",
                  at_least=1),
        ConfigKey("offset.metadata.max.bytes", _T.INT, "4096", "Largest committed offset metadata."),
        ConfigKey("offsets.commit.timeout.ms", _T.INT, "5000", "How long an offset commit or a group's metadata "
                  "waits for the followers of its __consumer_offsets partition.", at_least=1),
        ConfigKey("request.timeout.ms", _T.INT, "30000", "How long the transaction coordinator waits for the "
                  "followers of its __transaction_state partition.", at_least=1),
        ConfigKey("group.min.session.timeout.ms", _T.INT, "6000", "Smallest session timeout a member may use."),
        ConfigKey("group.max.session.timeout.ms", _T.INT, "1800000", "Largest session timeout a member may use."),
        ConfigKey("group.max.size", _T.INT, "2147483647", "Most members a classic group may have.", at_least=1),
        ConfigKey("transaction.state.log.replication.factor", _T.SHORT, "3", "Txn log replicas."),
        ConfigKey("transaction.state.log.min.isr", _T.INT, "2", "Txn log min ISR."),
        ConfigKey("transaction.state.log.num.partitions", _T.INT, "50", "Txn log partitions.", at_least=1),
        ConfigKey("transaction.max.timeout.ms", _T.INT, "900000", "Largest transaction timeout.", at_least=1),
        ConfigKey("transaction.abort.timed.out.transaction.cleanup.interval.ms", _T.INT, "10000",
                  "How often timed-out transactions are aborted.", at_least=1),
        ConfigKey("producer.id.expiration.ms", _T.INT, "86400000",
                  "Forget an idle producer's state (no open transaction) after this long.", at_least=1),
        ConfigKey("producer.id.expiration.check.interval.ms", _T.INT, "600000",
                  "How often expired producer state is removed.", at_least=1),
        ConfigKey("max.incremental.fetch.session.cache.slots", _T.INT, "1000",
                  "Incremental fetch sessions (KIP-227) the broker keeps.", at_least=0),
        ConfigKey("transactional.id.expiration.ms", _T.INT, "604800000",
                  "Forget a transactional id with no transaction in progress after this long without "
                  "an update (a tombstone in __transaction_state).", at_least=1),
        ConfigKey("transaction.remove.expired.transaction.cleanup.interval.ms", _T.INT, "3600000",
                  "How often expired transactional ids are removed.", at_least=1),
        ConfigKey("group.consumer.heartbeat.interval.ms", _T.INT, "5000", "KIP-848 member heartbeat interval.",
                  at_least=1),
        ConfigKey("group.consumer.session.timeout.ms", _T.INT, "45000", "KIP-848 member session timeout.",
                  at_least=1),
        ConfigKey("group.consumer.assignors", _T.LIST, "uniform,range", "KIP-848 server-side assignors.",
                  one_of=("uniform", "range")),
        ConfigKey("group.initial.rebalance.delay.ms", _T.INT, "3000", "First rebalance delay."),
        ConfigKey("share.coordinator.state.topic.replication.factor", _T.SHORT, "3", "Accepted."),
        ConfigKey("share.coordinator.state.topic.min.isr", _T.SHORT, "2", "Accepted."),
        ConfigKey("unclean.leader.election.enable", _T.BOOLEAN, "false", "Out-of-sync leaders."),
        ConfigKey("log.message.timestamp.before.max.ms", _T.LONG, str(LONG_MAX), "Max record age."),
        ConfigKey("log.message.timestamp.after.max.ms", _T.LONG, str(LONG_MAX), "Max future skew."),
        ConfigKey("cluster.id", _T.STRING, None, "Cluster id used when formatting a new data dir."),
    ]
)

assert all(s.broker_key in BROKER_CONFIGS for syns in TOPIC_SYNONYMS.values() for s in syns)


@dataclass(frozen=True, slots=True)
class Listener:
    name: str
    host: str
    port: int

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


def parse_listeners(key: str, items: list[str]) -> list[Listener]:
    """`NAME://host:port` entries; an empty host means all interfaces, as in Kafka."""
    listeners: list[Listener] = []
    for item in items:
        name, sep, rest = item.partition("://")
        host, colon, port = rest.rpartition(":")
        if not sep or not colon or not name:
            raise ConfigError(f"Invalid value {item} for configuration {key}: expected NAME://host:port")
        try:
            number = int(port)
        except ValueError:
            raise ConfigError(f"Invalid value {item} for configuration {key}: bad port {port!r}") from None
        if not 0 <= number <= 65535:
            raise ConfigError(f"Invalid value {item} for configuration {key}: port out of range")
        listeners.append(Listener(name.upper(), host.strip("[]"), number))
    names = [listener.name for listener in listeners]
    if len(set(names)) != len(names):
        raise ConfigError(f"Invalid value {','.join(items)} for configuration {key}: duplicate listener names")
    return listeners


@dataclass(frozen=True)
class BrokerConfig:
    """Validated broker configuration. `static` keeps the raw strings for DescribeConfigs."""

    static: dict[str, str]
    values: dict[str, Any]
    unknown: tuple[str, ...]
    listeners: list[Listener] = field(default_factory=list)
    advertised: list[Listener] = field(default_factory=list)
    security_protocols: dict[str, str] = field(default_factory=dict)  # listener name -> its security protocol

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    def security_protocol(self, listener: str) -> str:
        """PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL: what `listener.security.protocol.map` gives the listener."""
        return self.security_protocols[listener]

    @property
    def inter_broker_listener(self) -> str:
        """The listener brokers reach each other on: `inter.broker.listener.name`, else the listener named after
        `security.inter.broker.protocol` (PLAINTEXT by default), as Kafka resolves it."""
        return inter_broker_listener(self.values)

    @property
    def node_id(self) -> int:
        return int(self.values["node.id"])

    @property
    def log_dirs(self) -> list[Path]:
        dirs = self.values.get("log.dirs") or [self.values["log.dir"]]
        return [Path(d) for d in dirs]

    @property
    def metadata_dir(self) -> Path:
        explicit = self.values.get("metadata.log.dir")
        return Path(explicit) if explicit else self.log_dirs[0]

    @property
    def controller_listener_names(self) -> list[str]:
        return [name.upper() for name in self.values["controller.listener.names"]]

    @property
    def client_listeners(self) -> list[Listener]:
        """Listeners that serve clients (everything but the controller listeners)."""
        return [lst for lst in self.listeners if lst.name not in self.controller_listener_names]

    @property
    def advertised_client_listeners(self) -> list[Listener]:
        return [lst for lst in self.advertised if lst.name not in self.controller_listener_names]

    @property
    def is_broker(self) -> bool:
        """Whether this node serves clients and hosts partitions (`process.roles` includes broker)."""
        return "broker" in self.values["process.roles"]

    @property
    def is_voter(self) -> bool:
        """Whether this node votes in the quorum (a controller); a broker-only node only observes it."""
        return self.node_id in self.quorum_voters

    @property
    def quorum_voters(self) -> dict[int, tuple[str, int]]:
        """`controller.quorum.voters` by id: where each voter's controller listener is."""
        return parse_voters(self.values["controller.quorum.voters"])

    @property
    def retention_check_interval_s(self) -> float:
        return int(self.values["log.retention.check.interval.ms"]) / 1000.0

    def static_topic_defaults(self) -> dict[str, str]:
        """The broker keys that act as topic-config synonyms, as given in the file/overrides."""
        keys = {s.broker_key for syns in TOPIC_SYNONYMS.values() for s in syns}
        return {k: v for k, v in self.static.items() if k in keys}

    def new_cluster_id(self) -> str:
        return self.values.get("cluster.id") or random_cluster_id()


def random_cluster_id() -> str:
    """A new cluster id in Kafka's form (a UUID in URL-safe base64, unpadded). As Kafka's `Uuid.randomUuid`, never one
    that starts with "-": `--cluster-id -Ab...` would be read as a flag by every command line tool."""
    import base64

    while True:
        candidate = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not candidate.startswith("-"):
            return candidate


def _check_roles(values: dict[str, Any], listeners: list[Listener]) -> None:
    roles = set(values["process.roles"])
    controller_names = {n.upper() for n in values["controller.listener.names"]}
    names = {lst.name for lst in listeners}
    if "controller" in roles and not controller_names & names:
        raise ConfigError(
            "controller.listener.names must contain at least one value appearing in the 'listeners' "
            "configuration when running the KRaft controller role"
        )
    if "broker" in roles and not names - controller_names:
        raise ConfigError("listeners must contain at least one non-controller listener for the broker role")
    voters = parse_voters(values["controller.quorum.voters"])
    node_id = int(values["node.id"])
    if voters and "controller" in roles and node_id not in voters:
        raise ConfigError(
            f"If process.roles contains the 'controller' role, the node id {node_id} must be included in the set "
            f"of voters controller.quorum.voters={','.join(values['controller.quorum.voters'])}"
        )
    if voters and roles == {"broker"} and node_id in voters:
        raise ConfigError(
            f"If process.roles contains just the 'broker' role, the node id {node_id} must not be included in the "
            f"set of voters controller.quorum.voters={','.join(values['controller.quorum.voters'])}"
        )
    _check_separate_roles(values, roles, controller_names, names)


def _check_separate_roles(values: dict[str, Any], roles: set[str], controller_names: set[str],
                          names: set[str]) -> None:
    """KafkaConfig's checks of a broker-only and a controller-only node. Either needs the quorum it belongs to
    (`controller.quorum.bootstrap.servers`, the dynamic quorum, is not supported: voters are required); a combined
    node without voters stays the single-node broker `bus broker` runs by default."""
    if roles == {"broker", "controller"}:
        return
    role = "broker" if roles == {"broker"} else "controller"
    if not values["controller.quorum.voters"]:
        raise ConfigError(
            f"If using process.roles={role}, controller.quorum.voters must contain a parseable set of voters "
            "(controller.quorum.bootstrap.servers is not supported)")
    if role == "broker":
        if not controller_names:
            raise ConfigError(
                "controller.listener.names must contain at least one value when running KRaft with just the broker "
                "role")
        if controller_names & names:
            raise ConfigError(
                "controller.listener.names must not contain a value appearing in the 'listeners' configuration when "
                "running KRaft with just the broker role")
        return
    if names - controller_names:
        raise ConfigError(
            "The listeners config must only contain KRaft controller listeners from controller.listener.names when "
            "process.roles=controller")
    inter_broker = values.get("inter.broker.listener.name")
    if inter_broker and inter_broker.upper() in controller_names:
        raise ConfigError(
            "controller.listener.names must not contain an explicitly set inter.broker.listener.name configuration "
            "value when process.roles=controller")


def inter_broker_listener(values: Mapping[str, Any]) -> str:
    return str(values.get("inter.broker.listener.name") or values["security.inter.broker.protocol"]).upper()


def security_protocol_map(values: Mapping[str, Any], static: Mapping[str, str],
                          listeners: list[Listener]) -> dict[str, str]:
    """Every listener's security protocol (`listener.security.protocol.map`), checked as Kafka's KafkaConfig does.

    Left at its default, the map also gives controller listeners it does not name PLAINTEXT (Kafka's KRaft rule),
    so `CONTROLLER://` needs no entry of its own; a listener the map does not name is refused.
    """
    key = "listener.security.protocol.map"
    mapping: dict[str, str] = {}
    for item in values[key]:
        name, colon, protocol = item.partition(":")
        if not colon or not name.strip() or protocol.strip().upper() not in SECURITY_PROTOCOLS:
            raise ConfigError(f"Invalid value {','.join(values[key])} for configuration {key}: {item!r} is not "
                              f"NAME:PROTOCOL with PROTOCOL one of {', '.join(SECURITY_PROTOCOLS)}")
        mapping[name.strip().upper()] = protocol.strip().upper()
    if key not in static:
        for name in values["controller.listener.names"]:
            mapping.setdefault(name.upper(), "PLAINTEXT")
    for lst in listeners:
        if lst.name not in mapping:
            raise ConfigError(f"Listener with name {lst.name} defined in listeners not found in {key}.")
    return mapping


def _check_inter_broker_listener(values: Mapping[str, Any], static: Mapping[str, str],
                                 advertised: list[Listener], protocols: Mapping[str, str]) -> None:
    """A broker's inter-broker listener must exist among its advertised listeners (KafkaConfig's checks)."""
    if "broker" not in values["process.roles"]:
        return
    if values.get("inter.broker.listener.name") and "security.inter.broker.protocol" in static:
        raise ConfigError("Only one of inter.broker.listener.name and security.inter.broker.protocol should be set.")
    name = inter_broker_listener(values)
    controllers = {n.upper() for n in values["controller.listener.names"]}
    names = [a.name for a in advertised if a.name not in controllers]
    if values.get("inter.broker.listener.name") and name not in protocols:
        raise ConfigError(f"Listener with name {name} defined in inter.broker.listener.name not found in "
                          "listener.security.protocol.map.")
    if name not in names:
        raise ConfigError(f"inter.broker.listener.name must be a listener name defined in advertised.listeners. The "
                          f"valid options based on currently configured listeners are {','.join(names)}")


def parse_voters(items: list[str]) -> dict[int, tuple[str, int]]:
    """`controller.quorum.voters` (`id@host:port,...`) as {id: (host, port)}; a malformed entry is a ConfigError."""
    voters: dict[int, tuple[str, int]] = {}
    for voter in items:
        node, at, address = voter.partition("@")
        host, colon, port = address.rpartition(":")
        if not at or not node.isdigit() or not colon or not host or not port.isdigit() or int(port) > 65535:
            raise ConfigError(
                f"Invalid value {voter} for configuration controller.quorum.voters: expected id@host:port"
            )
        if int(node) in voters:
            raise ConfigError(
                f"Invalid value {','.join(items)} for configuration controller.quorum.voters: voter {node} "
                "is listed twice"
            )
        voters[int(node)] = (host.strip("[]"), int(port))
    return voters


def load_broker_config(props: Mapping[str, str]) -> BrokerConfig:
    """Validate `props` (file + overrides) and fill in Kafka's defaults."""
    static = dict(props)
    raw = BROKER_CONFIGS.defaults() | static
    if "broker.id" in static and "node.id" not in static:
        raw["node.id"] = static["broker.id"]
    values = BROKER_CONFIGS.parse(raw)
    unknown = tuple(sorted(k for k in static if k not in BROKER_CONFIGS and not _is_passthrough(k)))
    listeners = parse_listeners("listeners", values["listeners"])
    advertised_items = values.get("advertised.listeners")
    advertised = parse_listeners("advertised.listeners", advertised_items) if advertised_items else listeners
    advertised = [
        Listener(a.name, "localhost" if a.host in ("", "0.0.0.0", "::") else a.host, a.port)
        for a in advertised
    ]
    _check_roles(values, listeners)
    protocols = security_protocol_map(values, static, listeners + advertised)
    _check_inter_broker_listener(values, static, advertised, protocols)
    return BrokerConfig(static=static, values=values, unknown=unknown, listeners=listeners, advertised=advertised,
                        security_protocols=protocols)


def _is_passthrough(key: str) -> bool:
    """Per-listener keys (`listener.name.x.*`) and client quotas are accepted without checking."""
    return key.startswith(("listener.name.", "quota.", "metric.", "sasl.", "ssl.", "authorizer."))
