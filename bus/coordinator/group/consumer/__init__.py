"""KIP-848 consumer groups (`group.protocol=consumer`): server-side assignment and reconciliation.

Members heartbeat their subscription and owned partitions; the coordinator computes a target
assignment with a server-side assignor (uniform or range) and moves each member towards it one
safe step at a time: a partition is only given to a member after its previous owner has revoked it.
"""
