"""The controller: the cluster's metadata (topics, partitions, configs) kept in a metadata log.

Single-node today (one voter, combined mode); the records are the shape a Raft-replicated
metadata log needs, so the KRaft quorum can replicate the same log later.
"""
