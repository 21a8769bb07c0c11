"""Where the controller's metadata records go, whichever log it is.

- `record_log.py`: the interface the controller writes through (`MetadataRecordLog`) and what replays into it;
- `local_file.py`: `MetadataLog`, a node's own checksummed file when it runs no quorum (written = committed);
- `quorum.py`: `RaftMetadataLog`, the records in the KRaft quorum's replicated log (committed by a majority);
- `entry_codec.py`: how records are encoded in the quorum's log entries and snapshots.
"""
