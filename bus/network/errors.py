"""Exceptions that end a connection: the broker's answer to requests it must not (or cannot) answer."""


class InvalidRequest(Exception):
    """A request the broker cannot decode: Kafka closes the connection, so do we."""


class CloseConnection(InvalidRequest):
    """A handler's way to close the connection after a request that gets no response (acks=0 errors)."""
