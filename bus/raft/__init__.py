"""KRaft's consensus core (KIP-595 Raft, KIP-630 snapshots), sans-IO.

The metadata log of a controller quorum is replicated with Kafka's own RPCs (Vote, BeginQuorumEpoch,
EndQuorumEpoch, Fetch, FetchSnapshot, DescribeQuorum). This package decides *what* to send and when;
it never opens a socket, starts a task or reads a clock, so every rule is tested deterministically and
the broker plugs in whatever transport it has:

- `config`: the `controller.quorum.*` settings (static voter set; KIP-853 is out of scope).
- `messages`: the RPC payloads the core consumes and emits, named after kio's fields.
- `log`: the narrow interface the core needs from the replicated log, and an in-memory log.
- `quorum_state`: the persisted election state (Kafka's `quorum-state` file).
- `roles`: the election states (Unattached, Voted, Candidate, Leader, Follower, Resigned).
- `requests`: one outbound request in flight per destination, timeouts, retry backoff.
- `node`: `RaftNode`, driven by `tick(now_ms)` and `handle(envelope, now_ms)`.
"""
