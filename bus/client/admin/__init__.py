"""The admin client: Kafka's `Admin` API, blocking, over the native client's connections.

`from bus.client.admin import AdminClient` (and the types its calls take and return) is the whole public face; the
modules behind it are split as Kafka's admin API reads, one concern each: `client.py` holds `AdminClient` (config,
connections, routing and the retry loop) and composes it from the mixins of `cluster.py` (brokers, features, log
dirs), `quorum.py` (the KRaft metadata quorum), `topics.py` (topics and partitions), `reassignment.py` (replica
moves and leader elections), `configs.py`, `offsets.py` (offset look-ups and records deletion), `groups.py`
(consumer groups and their offsets), `transactions.py` (transactions and producers), `acls.py` and `scram.py`
(SCRAM credentials). `common.py` has what they share: the `AdminError` family every call raises, and `AdminCalls`,
the client as the mixins use it.
"""

from bus.client.admin.acls import ANY_ACL
from bus.client.admin.client import AdminClient
from bus.client.admin.cluster import (
    ClusterDescription,
    FeatureMetadata,
    LogDirDescription,
    ReplicaInfo,
    SupportedVersionRange,
)
from bus.client.admin.common import (
    AdminError,
    AdminTimeoutError,
    BrokerInfo,
    GroupIdNotFoundError,
    InvalidConfigError,
    NonEmptyGroupError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from bus.client.admin.configs import (
    AlterConfigOp,
    ConfigEntry,
    ConfigResource,
    ConfigResourceType,
    ConfigSource,
    ConfigSynonym,
)
from bus.client.admin.groups import (
    ConsumerGroupDescription,
    GroupListing,
    GroupPartitionLag,
    MemberDescription,
    OffsetAndMetadata,
)
from bus.client.admin.offsets import ListOffsetsResultInfo, OffsetSpec
from bus.client.admin.quorum import QuorumInfo, QuorumReplicaState
from bus.client.admin.reassignment import ElectionType, PartitionReassignment
from bus.client.admin.scram import (
    ScramCredentialAlteration,
    ScramCredentialInfo,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from bus.client.admin.topics import NewPartitions, NewTopic, PartitionInfo, TopicDescription
from bus.client.admin.transactions import ProducerState, TransactionDescription, TransactionListing
from bus.client.connection import KafkaConnectionError
from bus.protocol.topic_partition import TopicPartition
from bus.security.acls import AclBinding, AclBindingFilter, AclOperation, PatternType, PermissionType, ResourceType

__all__ = [
    "ANY_ACL",
    "AclBinding",
    "AclBindingFilter",
    "AclOperation",
    "AdminClient",
    "AdminError",
    "AdminTimeoutError",
    "AlterConfigOp",
    "BrokerInfo",
    "ClusterDescription",
    "ConfigEntry",
    "ConfigResource",
    "ConfigResourceType",
    "ConfigSource",
    "ConfigSynonym",
    "ConsumerGroupDescription",
    "ElectionType",
    "FeatureMetadata",
    "GroupIdNotFoundError",
    "GroupListing",
    "GroupPartitionLag",
    "InvalidConfigError",
    "KafkaConnectionError",
    "ListOffsetsResultInfo",
    "LogDirDescription",
    "MemberDescription",
    "NewPartitions",
    "NewTopic",
    "NonEmptyGroupError",
    "OffsetAndMetadata",
    "OffsetSpec",
    "PartitionInfo",
    "PartitionReassignment",
    "PatternType",
    "PermissionType",
    "ProducerState",
    "QuorumInfo",
    "QuorumReplicaState",
    "ReplicaInfo",
    "ResourceType",
    "ScramCredentialAlteration",
    "ScramCredentialInfo",
    "SupportedVersionRange",
    "TopicAlreadyExistsError",
    "TopicDescription",
    "TopicPartition",
    "TransactionDescription",
    "TransactionListing",
    "UnknownTopicOrPartitionError",
    "UserScramCredentialDeletion",
    "UserScramCredentialUpsertion",
]
