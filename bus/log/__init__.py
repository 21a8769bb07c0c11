"""Partition storage: segmented append-only logs with offset and time indexes, retention and compaction."""
