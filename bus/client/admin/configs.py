"""The admin client's config calls: describe configs, and alter them whole or one entry at a time.

Java's `Admin.describeConfigs`, `incrementalAlterConfigs` and `alterConfigs`, which kafka-configs is built on, with
Kafka's config model (`ConfigResource`, `ConfigEntry` with its source and synonyms, `AlterConfigOp`). A broker's
(or broker logger's) configs go to that broker, which alone knows its own view; topic and group configs to any
broker.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, NamedTuple

from kio.schema.errors import ErrorCode

from bus.client.admin.common import AdminCalls, AdminError, finish, first_error

DESCRIBE_CONFIGS, ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS = 32, 33, 44


class ConfigResourceType(enum.IntEnum):
    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    GROUP = 32


class ConfigResource(NamedTuple):
    type: ConfigResourceType
    name: str


class ConfigSource(enum.IntEnum):
    """Where a config value comes from (Kafka's ConfigEntry.ConfigSource, by wire id)."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8

    @classmethod
    def of(cls, value: int) -> ConfigSource:
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN


@dataclasses.dataclass(frozen=True, slots=True)
class ConfigSynonym:
    name: str
    value: str | None
    source: ConfigSource


@dataclasses.dataclass(frozen=True, slots=True)
class ConfigEntry:
    name: str
    value: str | None
    source: ConfigSource
    is_read_only: bool = False
    is_sensitive: bool = False
    synonyms: list[ConfigSynonym] = dataclasses.field(default_factory=list)
    documentation: str | None = None

    @property
    def is_default(self) -> bool:
        return self.source == ConfigSource.DEFAULT_CONFIG


@dataclasses.dataclass(frozen=True, slots=True)
class AlterConfigOp:
    """One IncrementalAlterConfigs operation: SET / DELETE / APPEND / SUBTRACT a config."""

    name: str
    value: str | None = None
    op: int = 0

    SET: ClassVar[int] = 0
    DELETE: ClassVar[int] = 1
    APPEND: ClassVar[int] = 2
    SUBTRACT: ClassVar[int] = 3

    @classmethod
    def set(cls, name: str, value: str) -> AlterConfigOp:
        return cls(name, value, cls.SET)

    @classmethod
    def delete(cls, name: str) -> AlterConfigOp:
        return cls(name, None, cls.DELETE)


def _config_entry(c: Any) -> ConfigEntry:
    synonyms = [ConfigSynonym(s.name, s.value, ConfigSource.of(int(s.source))) for s in getattr(c, "synonyms", ())]
    source = int(getattr(c, "config_source", -1))
    if source < 0:  # DescribeConfigs v0 had is_default instead of a source
        source = ConfigSource.DEFAULT_CONFIG if getattr(c, "is_default", False) else ConfigSource.UNKNOWN
    return ConfigEntry(name=c.name, value=c.value, source=ConfigSource.of(source), is_read_only=bool(c.read_only),
                       is_sensitive=bool(c.is_sensitive), synonyms=synonyms,
                       documentation=getattr(c, "documentation", None))


def _by_config_node(admin: AdminCalls, resources: Iterable[ConfigResource]) -> dict[int, list[ConfigResource]]:
    """Config resources grouped by the node that must answer for them (see `_config_node`)."""
    by_node: dict[int, list[ConfigResource]] = {}
    for resource in resources:
        by_node.setdefault(_config_node(admin, resource), []).append(resource)
    return by_node


def _config_node(admin: AdminCalls, resource: ConfigResource) -> int:
    """Broker resources go to that broker (its own view); everything else to any broker."""
    if resource.type in (ConfigResourceType.BROKER, ConfigResourceType.BROKER_LOGGER) and resource.name:
        try:
            node = int(resource.name)
        except ValueError:
            raise AdminError(ErrorCode.invalid_request,
                             f"broker id must be an integer, got '{resource.name}'") from None
        if node not in admin._brokers:
            admin._refresh_brokers()
        if node not in admin._brokers:
            raise AdminError(ErrorCode.broker_not_available, f"Broker {node} is not part of the cluster.")
        return node
    return admin._any_node()


class ConfigAdmin:
    """The config calls `AdminClient` inherits."""

    def describe_configs(self: AdminCalls, resources: Iterable[ConfigResource], *, include_synonyms: bool = False,
                         include_documentation: bool = False) -> dict[ConfigResource, dict[str, ConfigEntry]]:
        """Every config of each resource with its value, source and (optionally) synonyms."""
        wanted = [ConfigResource(ConfigResourceType(r.type), r.name) for r in resources]
        out: dict[ConfigResource, dict[str, ConfigEntry]] = {}

        def attempt() -> None:
            by_node = _by_config_node(self, (r for r in wanted if r not in out))
            errors: dict[ConfigResource, AdminError | None] = {}
            for node, batch in by_node.items():
                def describe(s: Any, batch: list[ConfigResource] = batch) -> Any:
                    return s.make(
                        "DescribeConfigsRequest",
                        resources=[s.make("DescribeConfigsResource", resource_type=int(r.type),
                                          resource_name=r.name, configuration_keys=None) for r in batch],
                        include_synonyms=include_synonyms, include_documentation=include_documentation)

                response = self._send(node, DESCRIBE_CONFIGS, describe)
                for result in response.results:
                    key = ConfigResource(ConfigResourceType(int(result.resource_type)), result.resource_name)
                    code = int(result.error_code)
                    if code:
                        errors[key] = AdminError.of(code, result.error_message)
                        continue
                    out[key] = {c.name: _config_entry(c) for c in result.configs}
            failure = first_error(errors)
            if failure is not None:
                raise failure

        self._call(attempt, "describe configs")
        return {r: out[r] for r in wanted if r in out}

    def incremental_alter_configs(self: AdminCalls, changes: Mapping[ConfigResource, Iterable[AlterConfigOp]], *,
                                  validate_only: bool = False,
                                  raise_on_error: bool = True) -> dict[ConfigResource, AdminError | None]:
        """SET / DELETE / APPEND / SUBTRACT individual configs, leaving the others alone."""
        plan = {ConfigResource(ConfigResourceType(r.type), r.name): list(ops) for r, ops in changes.items()}
        results: dict[ConfigResource, AdminError | None] = {}

        def attempt() -> None:
            by_node = _by_config_node(self, (r for r in plan if r not in results))
            for node, batch in by_node.items():
                def alter(s: Any, batch: list[ConfigResource] = batch) -> Any:
                    return s.make(
                        "IncrementalAlterConfigsRequest", validate_only=validate_only,
                        resources=[s.make("AlterConfigsResource", resource_type=int(r.type), resource_name=r.name,
                                          configs=[s.make("AlterableConfig", name=op.name, config_operation=op.op,
                                                          value=op.value) for op in plan[r]])
                                   for r in batch])

                response = self._send(node, INCREMENTAL_ALTER_CONFIGS, alter)
                for result in response.responses:
                    key = ConfigResource(ConfigResourceType(int(result.resource_type)), result.resource_name)
                    code = int(result.error_code)
                    results[key] = AdminError.of(code, result.error_message) if code else None

        self._call(attempt, "alter configs")
        return finish(results, raise_on_error)

    def alter_configs(self: AdminCalls, configs: Mapping[ConfigResource, Mapping[str, str]], *,
                      validate_only: bool = False,
                      raise_on_error: bool = True) -> dict[ConfigResource, AdminError | None]:
        """Legacy AlterConfigs: replace a resource's whole dynamic config set with `configs`."""
        plan = {ConfigResource(ConfigResourceType(r.type), r.name): dict(c) for r, c in configs.items()}
        results: dict[ConfigResource, AdminError | None] = {}

        def attempt() -> None:
            by_node = _by_config_node(self, plan)
            for node, batch in by_node.items():
                def replace(s: Any, batch: list[ConfigResource] = batch) -> Any:
                    return s.make(
                        "AlterConfigsRequest", validate_only=validate_only,
                        resources=[s.make("AlterConfigsResource", resource_type=int(r.type), resource_name=r.name,
                                          configs=[s.make("AlterableConfig", name=k, value=v)
                                                   for k, v in plan[r].items()])
                                   for r in batch])

                response = self._send(node, ALTER_CONFIGS, replace)
                for result in response.responses:
                    key = ConfigResource(ConfigResourceType(int(result.resource_type)), result.resource_name)
                    code = int(result.error_code)
                    results[key] = AdminError.of(code, result.error_message) if code else None

        self._call(attempt, "alter configs")
        return finish(results, raise_on_error)
