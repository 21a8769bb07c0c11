"""How every happybase client of the solution reaches an HBase Thrift (v1) server: ``[hbase]`` of the config.

happybase's defaults (buffered transport, binary protocol) are what the embedded gateway serves and what HBase's own
Thrift server serves unless started with ``-f`` (framed) or ``-c`` (compact); a production server is often both, for
its non-blocking server types. So ``transport``, ``protocol`` and ``timeout_ms`` are read from the config by every
client (capture writer, DR loaders, monitor, console, surveillance) through :class:`HBaseClient`, and `make up`
starts the gateway with the same settings.

A client whose transport or protocol does not match the server's gets no Thrift error it could explain: the server
closes the connection (or, for some server types, waits for more bytes). :meth:`HBaseClient.check` turns that into
an error that names the settings to compare; services call it once at start-up.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from contracts.config import Config

if TYPE_CHECKING:
    import happybase

TRANSPORTS = ("buffered", "framed")
PROTOCOLS = ("binary", "compact")


class HBaseSettingsError(ValueError):
    """``[hbase]`` holds a value no client can use (the message names the key)."""


class HBaseMismatch(ConnectionError):
    """The server answered nothing a client with these settings understands."""


@dataclass(frozen=True)
class HBaseClient:
    host: str = "127.0.0.1"
    port: int = 9090
    transport: str = "buffered"
    protocol: str = "binary"
    timeout_ms: int = 30_000

    def __post_init__(self) -> None:
        if self.transport not in TRANSPORTS:
            raise HBaseSettingsError(f"[hbase] transport must be one of {', '.join(TRANSPORTS)}, not "
                                     f"{self.transport!r}")
        if self.protocol not in PROTOCOLS:
            raise HBaseSettingsError(f"[hbase] protocol must be one of {', '.join(PROTOCOLS)}, not {self.protocol!r}")
        if not isinstance(self.timeout_ms, int) or self.timeout_ms <= 0:
            raise HBaseSettingsError(f"[hbase] timeout_ms must be a whole number of milliseconds > 0, not "
                                     f"{self.timeout_ms!r}")
        if not isinstance(self.port, int) or not 0 < self.port < 65536:
            raise HBaseSettingsError(f"[hbase] port must be 1-65535, not {self.port!r}")

    @classmethod
    def from_config(cls, config: Config, *, host: str | None = None, port: int | None = None) -> HBaseClient:
        """``[hbase]`` of ``config``; ``host`` / ``port`` override it (a flag, or the DR site's server)."""
        section = config.section("hbase")
        return cls(host=host or str(section.get("host", cls.host)),
                   port=port if port is not None else section.get("port", cls.port),
                   transport=str(section.get("transport", cls.transport)),
                   protocol=str(section.get("protocol", cls.protocol)),
                   timeout_ms=section.get("timeout_ms", cls.timeout_ms))

    def at(self, host: str, port: int) -> HBaseClient:
        """The same client settings for another server (the DR site's)."""
        return replace(self, host=host, port=port)

    @property
    def where(self) -> str:
        return f"HBase Thrift at {self.host}:{self.port} ({self.transport} transport, {self.protocol} protocol)"

    def options(self) -> dict[str, Any]:
        """happybase's connection keywords for these settings."""
        return {"host": self.host, "port": self.port, "transport": self.transport, "protocol": self.protocol,
                "timeout": self.timeout_ms}

    def connect(self, *, timeout_ms: int | None = None) -> happybase.Connection:
        import happybase  # here: Spark's driver imports this module before its executors need happybase

        return happybase.Connection(**{**self.options(), **({"timeout": timeout_ms} if timeout_ms else {})})

    def pool(self, size: int) -> happybase.ConnectionPool:
        import happybase

        return happybase.ConnectionPool(size, **self.options())

    def check(self, timeout_ms: int = 5_000) -> None:
        """One cheap call (getTableNames): raises :class:`HBaseMismatch` when the server closes the connection or
        does not answer (naming the settings to compare), ``ConnectionError`` when nothing listens."""
        from thriftpy2.transport import TTransportException

        try:
            conn = self.connect(timeout_ms=min(timeout_ms, self.timeout_ms))
        except TTransportException as exc:
            raise ConnectionError(f"cannot connect to {self.where}: {exc.message}") from None
        try:
            conn.tables()
        except (TimeoutError, TTransportException, ConnectionResetError, EOFError) as exc:
            raise HBaseMismatch(
                f"{self.where} closed the connection or did not answer a request ({type(exc).__name__}): it serves "
                "another transport or protocol; set [hbase] transport (buffered|framed) and protocol "
                "(binary|compact) to the server's") from None
        finally:
            conn.close()
