"""The controller: the cluster's metadata (topics, partitions, brokers, configs, ACLs, credentials) kept in a
metadata log, a node's own file without a quorum or the KRaft quorum's replicated log with one.

`controller.QuorumController` is the facade over one control manager per concern (`*_control.py`, as Kafka's);
`image.py` is the metadata image they validate against and the brokers read; `controller_channel.py` is how a node
reaches the active controller.
"""
