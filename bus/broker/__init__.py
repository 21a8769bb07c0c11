"""The broker: network server, request handlers (one per API in `apis/`) and the replica manager."""
