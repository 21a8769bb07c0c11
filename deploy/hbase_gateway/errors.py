"""Errors the store raises, named after the HBase exceptions a real server would throw.

They carry no Thrift types so the store and the filter parser stay testable without a server;
the Thrift layer maps each ``kind`` onto the IDL's ``IOError`` / ``IllegalArgument`` /
``AlreadyExists`` (see ``server.GatewayProcessor``).
"""

from __future__ import annotations

from typing import ClassVar


class HBaseError(Exception):
    """Base: reported to the client as HBase's Thrift ``IOError`` unless ``kind`` says otherwise."""

    kind: ClassVar[str] = "io"
    java_name: ClassVar[str] = "java.io.IOException"

    def __str__(self) -> str:
        return f"{self.java_name}: {super().__str__()}"


class IllegalArgumentError(HBaseError):
    kind = "illegal_argument"
    java_name = "java.lang.IllegalArgumentException"


class TableExistsError(HBaseError):
    kind = "already_exists"
    java_name = "org.apache.hadoop.hbase.TableExistsException"


class TableNotFoundError(HBaseError):
    java_name = "org.apache.hadoop.hbase.TableNotFoundException"


class TableNotEnabledError(HBaseError):
    java_name = "org.apache.hadoop.hbase.TableNotEnabledException"


class TableNotDisabledError(HBaseError):
    java_name = "org.apache.hadoop.hbase.TableNotDisabledException"


class NoSuchColumnFamilyError(HBaseError):
    java_name = "org.apache.hadoop.hbase.regionserver.NoSuchColumnFamilyException"


class RetriesExhaustedError(HBaseError):
    """What HBase's client raises when some actions of a batch (Table.put(list)) failed."""

    java_name = "org.apache.hadoop.hbase.client.RetriesExhaustedWithDetailsException"


class ScannerExpiredError(HBaseError):
    java_name = "org.apache.hadoop.hbase.UnknownScannerException"


class UnknownScannerError(IllegalArgumentError):
    """HBase's Thrift1 server answers an unknown scanner id with IllegalArgument."""


class NotImplementedByGatewayError(HBaseError):
    java_name = "java.lang.UnsupportedOperationException"
