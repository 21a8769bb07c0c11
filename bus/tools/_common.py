"""What every client-side tool shares: --bootstrap-server / --command-config, error reporting, progress.

Kafka's scripts all take `--bootstrap-server` and a `--command-config` properties file of client
settings, exit 1 with a one-line reason on bad flags or a failed call, and never hang on a dead
cluster. Keeping that behaviour in one place makes `bus topics`, `bus configs`, ... consistent.
The `--command-config` file is where a secured cluster's settings go (`security.protocol`, `sasl.mechanism`,
`sasl.jaas.config`, `ssl.truststore.location`, ...); a refused login is reported in one line like any failure.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bus.client.admin import AdminClient

# A tool waits this long for a TCP connection before calling the server unreachable (Java's default is
# 10 s; an operator at a prompt wants to hear sooner). `--command-config` may set it otherwise.
TOOL_CONNECT_TIMEOUT_MS = 5000


def package_version() -> str:
    """The installed package's version, which `--version` prints (Kafka's tools print their release the same way)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("securitybus")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def add_version_arg(parser: argparse.ArgumentParser) -> None:
    """`--version`: print the version and exit 0, as Kafka's tools that have the flag do."""
    parser.add_argument("--version", action="version", version=package_version(),
                        help="Display the version of this package (Kafka's tools: of Kafka) and exit.")


class ToolError(Exception):
    """A usage or input problem found by the tool itself: printed as is, exit code 1."""


def add_connection_args(parser: argparse.ArgumentParser, *, required: bool = True,
                        config_help: str = "Property file containing configs to be passed to Admin Client.",
                        config_aliases: tuple[str, ...] = ()) -> None:
    """`--bootstrap-server` and `--command-config` (also spelt as `config_aliases`: the older names some of Kafka's
    tools still take, such as kafka-console-consumer's `--consumer.config`)."""
    parser.add_argument("--bootstrap-server", metavar="HOST:PORT", required=required,
                        help=("REQUIRED: " if required else "") + "The server(s) to connect to, comma-separated.")
    parser.add_argument("--command-config", *config_aliases, dest="command_config", metavar="FILE", help=config_help)


def one_action(args: argparse.Namespace, actions: tuple[str, ...], listed: str) -> str:
    """The one action flag set among `actions` (Kafka's "exactly one action" check; `listed` names them)."""
    chosen = [a for a in actions if getattr(args, a)]
    if len(chosen) != 1:
        raise ToolError(f"Command must include exactly one action: {listed}")
    return chosen[0]


def parse_key_values(items: list[str] | None, what: str = "property") -> dict[str, str]:
    """`key=value` strings (each may itself be comma-free) into a dict, rejecting malformed ones."""
    out: dict[str, str] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ToolError(f"Invalid {what} '{item}': expected key=value")
        out[key.strip()] = value.strip()
    return out


def load_client_config(args: argparse.Namespace, extra: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Client config for the tool: the --command-config file, then `extra`, then --bootstrap-server."""
    from bus.config.properties import PropertiesError, load_properties

    conf: dict[str, Any] = {"socket.connection.setup.timeout.ms": TOOL_CONNECT_TIMEOUT_MS}
    path = getattr(args, "command_config", None)
    if path:
        try:
            conf.update(load_properties(path))
        except (OSError, PropertiesError) as exc:
            raise ToolError(f"Cannot read --command-config {path}: {exc}") from None
    conf.update(extra or {})
    if getattr(args, "bootstrap_server", None):
        conf["bootstrap.servers"] = args.bootstrap_server
    if not conf.get("bootstrap.servers"):
        raise ToolError("--bootstrap-server must be specified")
    return conf


def admin_client(args: argparse.Namespace, extra: Mapping[str, Any] | None = None) -> AdminClient:
    from bus.client.admin import AdminClient

    conf = load_client_config(args, extra)
    try:
        return AdminClient(conf)
    except ValueError as exc:
        raise ToolError(str(exc)) from None


def run_guarded(command: str, body: Callable[[], int | None]) -> int:
    """Run a tool's body; turn the failures an operator can cause into a message and exit code 1."""
    from bus.client.connection import KafkaConnectionError, UnsupportedVersionError
    from bus.client.errors import KafkaError

    try:
        return int(body() or 0)
    except ToolError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    except (KafkaError, KafkaConnectionError, UnsupportedVersionError) as exc:
        # AdminError (a KafkaError) reads "message (ERROR_NAME)"; client errors carry their own text.
        print(f"Error while executing {command} command : {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `bus ... | head`: the reader went away, which is not our failure. Point stdout at /dev/null
        # so the interpreter's final flush does not raise again (the Python docs' recipe).
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


class Progress:
    """A rich progress bar on stderr when it is a terminal; silent (and free) otherwise.

    Long operations (perf tests, resets over many partitions) show it so an operator sees motion,
    while scripts and tests reading stdout get exactly Kafka's output shapes.
    """

    def __init__(self, description: str, total: float | None, enabled: bool | None = None) -> None:
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self._progress: Any = None
        self._task: Any = None
        self.description = description
        self.total = total

    def __enter__(self) -> Progress:
        if self.enabled:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as RichProgress

            self._progress = RichProgress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                          TimeElapsedColumn(), console=Console(stderr=True), transient=True)
            self._progress.start()
            self._task = self._progress.add_task(self.description, total=self.total)
        return self

    def advance(self, amount: float = 1) -> None:
        if self._progress is not None:
            self._progress.advance(self._task, amount)

    def update(self, completed: float) -> None:
        if self._progress is not None:
            self._progress.update(self._task, completed=completed)

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()


@contextlib.contextmanager
def progress(description: str, total: float | None) -> Iterator[Progress]:
    with Progress(description, total) as bar:
        yield bar


def check_reachable(conf: Mapping[str, Any]) -> None:
    """Fail within seconds if no bootstrap server answers, before a client would block on metadata.

    The producer and consumer wait up to `max.block.ms` / `default.api.timeout.ms` (a minute) for
    metadata, which is right for an application but not for an operator who mistyped a port.
    """
    from bus.client.admin import AdminClient

    try:
        AdminClient(dict(conf)).close()
    except ValueError as exc:
        raise ToolError(str(exc)) from None
