"""The bus client settings of one service: its identity (a Kafka principal) and how it reaches the bus.

A solution config without ``[bus] client_properties_dir`` runs PLAINTEXT: a service's settings are just
``bootstrap.servers`` (tests and development setups). `make up` writes that key into ``DATA/solution.toml``: each
service then reads ``<dir>/<principal>.properties``, a Kafka client properties file (``bootstrap.servers``,
``security.protocol=SASL_SSL``, ``sasl.mechanism``, ``sasl.jaas.config`` with its SCRAM login,
``ssl.truststore.type=PEM`` and an absolute ``ssl.truststore.location``), the same file an operator passes to any Kafka
tool with ``--command-config``. The file holds a password, so one readable by anyone but its owner stops the service.

The DR site's bus is reached the same way from ``[dr]``: its ``bootstrap_servers`` and its own
``client_properties_dir`` (`make up`: ``DATA/secrets/dr``, the same principals with passwords of their own), read by
passing ``section=DR`` (the mirror's target side, the console's DR page).

Two flavours of the same settings: :func:`librdkafka` for confluent-kafka's clients (``sasl.username`` /
``sasl.password``, ``ssl.ca.location``), :func:`java` for the bus's own clients and Kafka's tools (the file's keys as
they are). Spark's Kafka options are the Java keys prefixed with ``kafka.`` (:func:`spark_options`).
"""

from __future__ import annotations

import stat
from pathlib import Path
from typing import TYPE_CHECKING

from bus.config.properties import PropertiesError, load_properties
from bus.security.jaas import JaasConfigError, parse_jaas_entry

if TYPE_CHECKING:
    from .config import Config

PRINCIPALS = ("simulator", "capture-ingest", "video-ingest", "cameras", "surveillance", "hit-loader", "monitor",
              "console", "mirror", "dr-loaders", "admin")
"""Every service's bus identity (its SCRAM user name; ``User:<name>`` in ACLs)."""

SECTION, KEY = "bus", "client_properties_dir"
DR = "dr"
"""The DR site's section: its bus's ``bootstrap_servers`` and ``client_properties_dir``."""
_DEFAULT_BOOTSTRAP = {SECTION: "127.0.0.1:9092", DR: "127.0.0.1:19092"}
_FILE_KEYS = ("bootstrap.servers", "security.protocol", "sasl.mechanism", "sasl.jaas.config", "ssl.truststore.type",
              "ssl.truststore.location", "ssl.endpoint.identification.algorithm")


class BusCredentialsError(ValueError):
    """A principal's properties file is missing, open to others or incomplete: the service cannot start."""


def properties_file(directory: Path, principal: str) -> Path:
    return directory / f"{principal}.properties"


def properties_dir(config: Config, section: str = SECTION) -> Path | None:
    """``[bus] client_properties_dir`` (``[dr]``'s with ``section=DR``; relative to the working directory), or None
    when that bus is PLAINTEXT."""
    value = config.get(section, KEY, "")
    if not value:
        return None
    if not isinstance(value, str):
        raise BusCredentialsError(f"{section}.{KEY} in {config.path} should be a directory, not {value!r}")
    return Path(value)


def java(config: Config, principal: str, bootstrap: str | None = None, section: str = SECTION) -> dict[str, str]:
    """``principal``'s client settings with Kafka's (Java) keys for the bus of ``section`` (the primary's ``bus``, or
    the DR site's ``dr``); ``bootstrap`` (a ``--bootstrap-server`` flag) overrides the file's and the config's
    ``bootstrap.servers``."""
    if principal not in PRINCIPALS:
        raise ValueError(f"unknown bus principal {principal!r} (one of {', '.join(PRINCIPALS)})")
    directory = properties_dir(config, section)
    settings = {"bootstrap.servers": str(config.get(section, "bootstrap_servers", _DEFAULT_BOOTSTRAP[section]))}
    if directory is not None:
        settings.update(read_properties(properties_file(directory, principal)))
    if bootstrap:
        settings["bootstrap.servers"] = bootstrap
    return settings


def librdkafka(config: Config, principal: str, bootstrap: str | None = None, section: str = SECTION) -> dict[str, str]:
    """``principal``'s client settings with librdkafka's keys (confluent-kafka's Producer, Consumer, AdminClient)."""
    return to_librdkafka(java(config, principal, bootstrap, section))


def spark_options(config: Config, principal: str, bootstrap: str | None = None) -> dict[str, str]:
    """The settings as Spark's Kafka source and sink take them: each key prefixed with ``kafka.``."""
    return {f"kafka.{key}": value for key, value in java(config, principal, bootstrap).items()}


def from_spark_options(options: dict[str, str]) -> dict[str, str]:
    """The Java settings back from Spark options (every ``kafka.``-prefixed key of :data:`_FILE_KEYS`)."""
    return {key: options[f"kafka.{key}"] for key in _FILE_KEYS if f"kafka.{key}" in options}


def to_librdkafka(settings: dict[str, str]) -> dict[str, str]:
    """Java client settings in librdkafka's names: the JAAS login becomes ``sasl.username`` / ``sasl.password``, the PEM
    trust store ``ssl.ca.location``; host-name checking stays on, as in both clients by default."""
    out = {key: value for key, value in settings.items()
           if key in ("bootstrap.servers", "security.protocol", "sasl.mechanism")}
    if "sasl.jaas.config" in settings:
        try:
            options = parse_jaas_entry(settings["sasl.jaas.config"]).options
        except JaasConfigError as exc:
            raise BusCredentialsError(f"sasl.jaas.config: {exc}") from None
        out["sasl.username"], out["sasl.password"] = options.get("username", ""), options.get("password", "")
    if "ssl.truststore.location" in settings:
        out["ssl.ca.location"] = settings["ssl.truststore.location"]
    return out


def read_properties(path: Path) -> dict[str, str]:
    """A principal's properties file; refused when it is missing, open to other users or lacks a key it needs."""
    try:
        mode = path.stat().st_mode
        values = load_properties(path)
    except OSError as exc:
        raise BusCredentialsError(f"cannot read the bus client properties {path}: {exc.strerror}") from None
    except PropertiesError as exc:
        raise BusCredentialsError(f"{path}: {exc}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise BusCredentialsError(f"{path} is open to other users (mode {stat.S_IMODE(mode):o}); chmod 600 it")
    protocol = values.get("security.protocol", "PLAINTEXT")
    needed = ["bootstrap.servers"]
    if protocol.startswith("SASL"):
        needed += ["sasl.mechanism", "sasl.jaas.config"]
    if protocol.endswith("SSL"):
        needed += ["ssl.truststore.location"]
    missing = [key for key in needed if not values.get(key)]
    if missing:
        raise BusCredentialsError(f"{path} should set {', '.join(missing)}")
    return {key: value for key, value in values.items() if key in _FILE_KEYS}
