"""Errors the log raises, each standing for the Kafka error code a request handler answers with."""


class OffsetOutOfRangeError(ValueError):
    """A fetch or DeleteRecords offset outside [log start offset, log end offset] (OFFSET_OUT_OF_RANGE)."""


class RecordBatchTooLargeError(ValueError):
    """A produce payload larger than segment.bytes can never fit in a segment (RECORD_LIST_TOO_LARGE)."""


class LogClosedError(RuntimeError):
    """The log was closed or deleted, e.g. its topic was deleted while a request was in flight."""
