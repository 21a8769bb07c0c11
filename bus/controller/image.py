"""The metadata image: the current state obtained by replaying the metadata log."""

from __future__ import annotations

import base64
import dataclasses
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bus.security.acls import AclBinding, AclIndex
from bus.security.scram import ScramCredential

MetadataRecord = dict[str, Any]
BROKER_RESOURCE = 4  # a `config` record's resource_type for broker configs (Kafka's ConfigResource.Type.BROKER)


@dataclass(slots=True)
class PartitionState:
    partition: int
    replicas: list[int]
    isr: list[int]
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0
    # An ongoing reassignment (Kafka's addingReplicas / removingReplicas): `replicas` holds the target followed by
    # the replicas being removed; both empty otherwise.
    adding_replicas: list[int] = field(default_factory=list)
    removing_replicas: list[int] = field(default_factory=list)

    @property
    def reassigning(self) -> bool:
        return bool(self.adding_replicas or self.removing_replicas)


@dataclass(slots=True)
class TopicImage:
    name: str
    topic_id: uuid.UUID
    partitions: dict[int, PartitionState] = field(default_factory=dict)
    configs: dict[str, str] = field(default_factory=dict)

    @property
    def internal(self) -> bool:
        return self.name.startswith("__")


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """A broker as it registered with the active controller (Kafka's RegisterBrokerRecord): where clients reach it."""

    broker_id: int
    endpoints: tuple[tuple[str, str, int], ...]  # (listener name, host, port)
    rack: str | None = None
    fenced: bool = False  # its session with the active controller expired: not offered to clients or placements
    in_controlled_shutdown: bool = False  # it asked to shut down: it leads nothing and joins no ISR until it returns
    incarnation_id: str | None = None  # one per broker process: another one while its session lives is refused

    def endpoint(self, listener: str) -> tuple[str, int] | None:
        for name, host, port in self.endpoints:
            if name == listener:
                return host, port
        return None


class MetadataImage:
    """Topics by name and id plus the cluster id; `apply` is the only way it changes."""

    def __init__(self) -> None:
        self.cluster_id: str | None = None
        self.topics: dict[str, TopicImage] = {}
        self.topics_by_id: dict[uuid.UUID, TopicImage] = {}
        self.offset = 0  # records applied, the image's metadata offset
        self.next_producer_id = 0
        self.brokers: dict[int, BrokerRegistration] = {}
        # Dynamic broker configs (ConfigRecords of resource type BROKER): resource name ("" for the cluster-wide
        # default, else a broker id) -> key -> value.
        self.broker_configs: dict[str, dict[str, str]] = {}
        self.acls = AclIndex()  # Kafka's AccessControlEntryRecords by id: what the authorizer checks requests against
        # Kafka's UserScramCredentialRecords: (mechanism, user) -> what SCRAM logins are checked against (KIP-554).
        self.scram_credentials: dict[tuple[str, str], ScramCredential] = {}

    def apply(self, record: dict[str, Any]) -> None:
        kind = record["type"]
        if kind == "cluster":
            self.cluster_id = record["cluster_id"]
        elif kind == "topic":
            topic = TopicImage(record["name"], uuid.UUID(record["topic_id"]))
            self.topics[topic.name] = topic
            self.topics_by_id[topic.topic_id] = topic
        elif kind == "partition":
            topic = self.topics_by_id[uuid.UUID(record["topic_id"])]
            topic.partitions[record["partition"]] = PartitionState(
                partition=record["partition"],
                replicas=list(record["replicas"]),
                isr=list(record["isr"]),
                leader=record["leader"],
                leader_epoch=record.get("leader_epoch", 0),
                partition_epoch=record.get("partition_epoch", 0),
                # Written only while a reassignment is under way (and absent from records older than reassignment).
                adding_replicas=list(record.get("adding_replicas", ())),
                removing_replicas=list(record.get("removing_replicas", ())),
            )
        elif kind == "config" and record.get("resource_type") == BROKER_RESOURCE:
            configs = self.broker_configs.setdefault(record["name"], {})
            if record["value"] is None:
                configs.pop(record["key"], None)
            else:
                configs[record["key"]] = record["value"]
            if not configs:
                del self.broker_configs[record["name"]]
        elif kind == "config":
            topic = self.topics[record["name"]]
            if record["value"] is None:
                topic.configs.pop(record["key"], None)
            else:
                topic.configs[record["key"]] = record["value"]
        elif kind == "producer_ids":
            self.next_producer_id = record["next"]
        elif kind == "broker":
            endpoints = tuple((name, host, port) for name, host, port in record["endpoints"])
            self.brokers[record["id"]] = BrokerRegistration(record["id"], endpoints, record.get("rack"),
                                                            incarnation_id=record.get("incarnation"))
        elif kind == "broker_fence":
            self.brokers[record["id"]] = dataclasses.replace(self.brokers[record["id"]], fenced=record["fenced"])
        elif kind == "broker_shutdown":  # Kafka's BrokerRegistrationChangeRecord with inControlledShutdown
            self.brokers[record["id"]] = dataclasses.replace(self.brokers[record["id"]], in_controlled_shutdown=True)
        elif kind == "remove_topic":
            removed = self.topics_by_id.pop(uuid.UUID(record["topic_id"]))
            del self.topics[removed.name]
        elif kind == "acl":
            self.acls.add(uuid.UUID(record["id"]), AclBinding.of(
                record["resource_type"], record["resource_name"], record["pattern_type"], record["principal"],
                record["host"], record["operation"], record["permission_type"]))
        elif kind == "remove_acl":
            self.acls.remove(uuid.UUID(record["id"]))
        elif kind == "user_scram_credential":
            self.scram_credentials[(record["mechanism"], record["name"])] = ScramCredential(
                _unb64(record["salt"]), _unb64(record["stored_key"]), _unb64(record["server_key"]),
                record["iterations"])
        elif kind == "remove_user_scram_credential":
            del self.scram_credentials[(record["mechanism"], record["name"])]
        else:
            raise ValueError(f"unknown metadata record type {kind!r}")
        self.offset += 1

    def copy(self) -> MetadataImage:
        """A copy that later `apply` calls to this image leave unchanged, made cheaply: `apply` replaces partition
        states and broker registrations rather than changing them, so the copy shares those and copies only the
        dicts that hold them (a snapshot is built from it while the image moves on)."""
        copied = MetadataImage()
        copied.cluster_id = self.cluster_id
        for topic in self.topics.values():
            twin = TopicImage(topic.name, topic.topic_id, dict(topic.partitions), dict(topic.configs))
            copied.topics[twin.name] = twin
            copied.topics_by_id[twin.topic_id] = twin
        copied.offset = self.offset
        copied.next_producer_id = self.next_producer_id
        copied.brokers = dict(self.brokers)
        copied.broker_configs = {name: dict(configs) for name, configs in self.broker_configs.items()}
        copied.acls = self.acls.copy()
        copied.scram_credentials = dict(self.scram_credentials)
        return copied

    def replace_with(self, other: MetadataImage) -> None:
        """Take `other`'s whole state in place (a snapshot from the leader), so every holder of this image, such as
        an `ImageView`, sees the new one."""
        self.cluster_id = other.cluster_id
        self.topics = other.topics
        self.topics_by_id = other.topics_by_id
        self.offset = other.offset
        self.next_producer_id = other.next_producer_id
        self.brokers = other.brokers
        self.broker_configs = other.broker_configs
        self.acls = other.acls
        self.scram_credentials = other.scram_credentials


def broker_record(broker_id: int, endpoints: Iterable[tuple[str, str, int]], rack: str | None,
                  incarnation_id: str | None) -> MetadataRecord:
    """A broker's registration (Kafka's RegisterBrokerRecord); an old log's record has no incarnation."""
    record: MetadataRecord = {"type": "broker", "id": broker_id, "endpoints": [list(e) for e in endpoints],
                              "rack": rack}
    if incarnation_id is not None:
        record["incarnation"] = incarnation_id
    return record


def broker_config_record(resource: str, key: str, value: str | None) -> MetadataRecord:
    """Set (or with None, delete) a dynamic broker config: Kafka's ConfigRecord with resource type BROKER."""
    return {"type": "config", "resource_type": BROKER_RESOURCE, "name": resource, "key": key, "value": value}


def acl_record(acl_id: uuid.UUID, acl: AclBinding) -> MetadataRecord:
    """An ACL (Kafka's AccessControlEntryRecord): its id, pattern and entry, in the wire codes."""
    return {"type": "acl", "id": str(acl_id), "resource_type": int(acl.resource_type),
            "resource_name": acl.resource_name, "pattern_type": int(acl.pattern_type), "principal": acl.principal,
            "host": acl.host, "operation": int(acl.operation), "permission_type": int(acl.permission)}


def remove_acl_record(acl_id: uuid.UUID) -> MetadataRecord:
    """Kafka's RemoveAccessControlEntryRecord."""
    return {"type": "remove_acl", "id": str(acl_id)}


def scram_credential_record(name: str, mechanism: str, credential: ScramCredential) -> MetadataRecord:
    """A user's SCRAM credential for one mechanism (Kafka's UserScramCredentialRecord): salt, keys and iterations,
    never the password. `mechanism` is the SASL name (SCRAM-SHA-256 or SCRAM-SHA-512)."""
    return {"type": "user_scram_credential", "name": name, "mechanism": mechanism,
            "salt": _b64(credential.salt), "stored_key": _b64(credential.stored_key),
            "server_key": _b64(credential.server_key), "iterations": credential.iterations}


def remove_scram_credential_record(name: str, mechanism: str) -> MetadataRecord:
    """Kafka's RemoveUserScramCredentialRecord."""
    return {"type": "remove_user_scram_credential", "name": name, "mechanism": mechanism}


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text, validate=True)


def partition_record(topic_id: str, state: PartitionState) -> MetadataRecord:
    """A partition's whole state as one record: its creation and every later change alike. A reassignment's
    adding and removing replicas are written only while one is under way (absent means none)."""
    record: MetadataRecord = {
        "type": "partition",
        "topic_id": topic_id,
        "partition": state.partition,
        "replicas": list(state.replicas),
        "isr": list(state.isr),
        "leader": state.leader,
        "leader_epoch": state.leader_epoch,
        "partition_epoch": state.partition_epoch,
    }
    if state.reassigning:
        record["adding_replicas"] = list(state.adding_replicas)
        record["removing_replicas"] = list(state.removing_replicas)
    return record


def snapshot_records(image: MetadataImage) -> Iterator[MetadataRecord]:
    """The records that recreate `image` exactly when applied to an empty one: the content of a metadata snapshot
    (Kafka's snapshot holds the same records its log does, one per piece of state), as fresh dicts. Lazily: a big
    image's snapshot is built a slice at a time (from a `copy`, which later commits leave unchanged)."""
    if image.cluster_id is not None:
        yield {"type": "cluster", "cluster_id": image.cluster_id}
    for broker in image.brokers.values():
        yield broker_record(broker.broker_id, broker.endpoints, broker.rack, broker.incarnation_id)
        if broker.fenced:
            yield {"type": "broker_fence", "id": broker.broker_id, "fenced": True}
        if broker.in_controlled_shutdown:
            yield {"type": "broker_shutdown", "id": broker.broker_id}
    for resource, configs in image.broker_configs.items():
        for key, value in configs.items():
            yield broker_config_record(resource, key, value)
    for topic in image.topics.values():
        topic_id = str(topic.topic_id)
        yield {"type": "topic", "name": topic.name, "topic_id": topic_id}
        for key, value in topic.configs.items():
            yield {"type": "config", "name": topic.name, "key": key, "value": value}
        for state in topic.partitions.values():
            yield partition_record(topic_id, state)
    if image.next_producer_id:
        yield {"type": "producer_ids", "next": image.next_producer_id}
    for acl_id, acl in image.acls.items():
        yield acl_record(acl_id, acl)
    for (mechanism, name), credential in image.scram_credentials.items():
        yield scram_credential_record(name, mechanism, credential)


def difference(old: MetadataImage, new: MetadataImage) -> list[MetadataRecord]:
    """What a listener of committed records must hear when `old` is replaced by `new` wholesale (a snapshot from the
    leader): a `remove_topic` for every topic `new` lacks and a deletion for every dynamic broker config it lacks,
    then the records of `new` except those of topics that did not change (a follower that was only a little behind
    hears only the few topics it missed) and its ACLs (the authorizer reads them from the image itself)."""
    changes: list[MetadataRecord] = [{"type": "remove_topic", "topic_id": str(topic_id)}
                                     for topic_id in old.topics_by_id if topic_id not in new.topics_by_id]
    changes += [broker_config_record(resource, key, None) for resource, configs in old.broker_configs.items()
                for key in configs if key not in new.broker_configs.get(resource, {})]
    unchanged = {str(t.topic_id) for t in new.topics.values() if old.topics_by_id.get(t.topic_id) == t}

    def topic_id_of(record: MetadataRecord) -> str | None:
        if record["type"] == "config" and record.get("resource_type") != BROKER_RESOURCE:
            return str(new.topics[record["name"]].topic_id)
        return record.get("topic_id")

    changes += [r for r in snapshot_records(new) if r["type"] != "acl" and topic_id_of(r) not in unchanged]
    return changes


class ImageScramCredentials:
    """The SASL servers' credential store (a `ScramCredentialStore`): the committed image's SCRAM credentials, read at
    every login, so an alteration counts once committed, and so does a snapshot that replaced the image."""

    __slots__ = ("_image",)

    def __init__(self, image: Callable[[], MetadataImage]) -> None:
        self._image = image

    def get(self, mechanism: str, user: str) -> ScramCredential | None:
        return self._image().scram_credentials.get((mechanism, user))


class ImageView:
    """One node's read-only view of the current image: what handlers and coordinators read (a MetadataView).

    The controller applies records to one `MetadataImage` in place, so the view always shows the
    latest committed state without being told of changes.
    """

    __slots__ = ("_configured_cluster_id", "_image", "_live_brokers", "node_id")

    def __init__(self, image: MetadataImage, node_id: int, live_brokers: Callable[[], Sequence[int]],
                 cluster_id: str | None = None) -> None:
        """`cluster_id`: the configured id, shown until the image has its own (a node of a quorum that has not
        caught up with the metadata log yet)."""
        self._image = image
        self._live_brokers = live_brokers
        self._configured_cluster_id = cluster_id
        self.node_id = node_id

    @property
    def cluster_id(self) -> str:
        cluster_id = self._image.cluster_id or self._configured_cluster_id
        if cluster_id is None:
            raise RuntimeError("the cluster id is committed before the broker serves")
        return cluster_id

    @property
    def brokers(self) -> Mapping[int, BrokerRegistration]:
        return self._image.brokers

    @property
    def topics(self) -> Mapping[str, TopicImage]:
        return self._image.topics

    @property
    def topics_by_id(self) -> Mapping[uuid.UUID, TopicImage]:
        return self._image.topics_by_id

    @property
    def live_brokers(self) -> Sequence[int]:
        return self._live_brokers()
