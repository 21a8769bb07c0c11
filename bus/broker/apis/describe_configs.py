"""DescribeConfigs (32): effective topic and broker configs, with where each value comes from.

Topic configs resolve through the same chain the log layer uses (topic override, then the broker's
`log.*` synonym, then Kafka's default), reported as synonyms when asked. A broker resource answers every
declared key: a dynamic value committed through the controller (DYNAMIC_BROKER_CONFIG for this broker,
DYNAMIC_DEFAULT_BROKER_CONFIG for the cluster-wide default) wins over the properties file (STATIC_BROKER_CONFIG)
and Kafka's default; only the dynamic keys (replication throttles) are not read-only. The cluster-wide default
resource (name "") holds the dynamic defaults set, and nothing else, as in Kafka.

Each resource needs DESCRIBE_CONFIGS: on the topic (TOPIC_AUTHORIZATION_FAILED), the group, or for a broker the
cluster (CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.apis._common import (
    RESOURCE_BROKER,
    RESOURCE_TOPIC,
    ConfigEntry,
    config_resource_refusal,
    dynamic_broker_chain,
    dynamic_broker_value,
    topic_config_entries,
    unsupported_resource,
)
from bus.broker.context import RequestContext
from bus.config.broker import BROKER_CONFIGS, DYNAMIC_BROKER_KEYS, BrokerConfig
from bus.config.topic import SOURCE_DEFAULT, SOURCE_STATIC_BROKER, TOPIC_SYNONYMS
from bus.controller.controller import ControllerError
from bus.controller.topic_control import validate_topic_name
from bus.protocol.error_response import ERROR_MESSAGES
from bus.security.acls import AclOperation

API_KEY = 32
MIN_VERSION = 1
MAX_VERSION = 4


def _broker_synonym_groups() -> dict[str, tuple[str, ...]]:
    """Broker keys that set the same thing in different units (log.retention.ms/.minutes/.hours).

    Kafka lists the whole group as synonyms of each member, most specific first; the groups are
    exactly the multi-key synonym chains of the topic configs.
    """
    groups: dict[str, tuple[str, ...]] = {}
    for synonyms in TOPIC_SYNONYMS.values():
        if len(synonyms) > 1:
            group = tuple(s.broker_key for s in synonyms)
            for key in group:
                groups[key] = group
    return groups


_BROKER_GROUPS = _broker_synonym_groups()


def broker_config_entries(config: BrokerConfig, dynamic: Mapping[str, Mapping[str, str]], resource: str,
                          keys: Iterable[str] | None = None) -> list[ConfigEntry]:
    """Broker `resource`'s configs: every declared key for a broker id; for the cluster-wide default resource ("")
    only the dynamic defaults set, as Kafka answers it."""
    wanted = BROKER_CONFIGS.keys if keys is None else [k for k in keys if k in BROKER_CONFIGS]
    if resource == "":
        wanted = [k for k in wanted if k in dynamic.get("", {})]
    entries = []
    for name in wanted:
        key = BROKER_CONFIGS[name]
        chain = dynamic_broker_chain(dynamic, resource, name)
        for synonym in _BROKER_GROUPS.get(name, (name,)):
            if synonym in config.static:
                chain.append((synonym, config.static[synonym], SOURCE_STATIC_BROKER))
            default = BROKER_CONFIGS[synonym].default
            if default is not None:
                chain.append((synonym, default, SOURCE_DEFAULT))
        value, _source = dynamic_broker_value(dynamic, config, resource, name)
        entries.append(
            ConfigEntry(
                name=name,
                value=None if key.sensitive else value,
                source=chain[0][2] if chain else SOURCE_DEFAULT,
                read_only=name not in DYNAMIC_BROKER_KEYS,  # the others change only with a restart
                sensitive=key.sensitive,
                config_type=int(key.type),
                documentation=key.doc,
                synonyms=tuple((n, None if key.sensitive else v, s) for n, v, s in chain),
            )
        )
    return entries


def _broker_entries(ctx: RequestContext, resource_name: str, keys: Iterable[str] | None) -> list[ConfigEntry]:
    if resource_name != "":
        try:
            node = int(resource_name)
        except ValueError:
            raise ControllerError(
                ErrorCode.invalid_request, f"Broker id must be an integer, but it is: {resource_name}"
            ) from None
        if node != ctx.node_id:
            raise ControllerError(
                ErrorCode.invalid_request,
                f"Unexpected broker id, expected {ctx.node_id} or empty string, but received {resource_name}",
            )
    return broker_config_entries(ctx.config, ctx.controller.image.broker_configs, resource_name, keys)


def _entries(ctx: RequestContext, resource: Any) -> list[ConfigEntry]:
    keys = resource.configuration_keys or None  # null or empty: every config
    if resource.resource_type == RESOURCE_TOPIC:
        validate_topic_name(resource.resource_name)
        topic = ctx.controller.topic(resource.resource_name)
        return topic_config_entries(topic.configs, ctx.config.static_topic_defaults(), keys)
    if resource.resource_type == RESOURCE_BROKER:
        return _broker_entries(ctx, resource.resource_name, keys)
    raise unsupported_resource(resource.resource_type)


def _result_entry(ctx: RequestContext, entry: ConfigEntry, synonyms: bool, documentation: bool) -> Any:
    return ctx.make(
        "DescribeConfigsResourceResult",
        name=entry.name,
        value=entry.value,
        read_only=entry.read_only,
        config_source=entry.source,
        is_sensitive=entry.sensitive,
        synonyms=[
            ctx.make("DescribeConfigsSynonym", name=name, value=value, source=source)
            for name, value, source in (entry.synonyms if synonyms else ())
        ],
        config_type=entry.config_type,
        documentation=entry.documentation if documentation else None,
    )


def handle(ctx: RequestContext, request: Any) -> Any:
    synonyms = getattr(request, "include_synonyms", False)
    documentation = getattr(request, "include_documentation", False)
    results = []
    for resource in request.resources:
        code, message = ErrorCode.none, None
        entries: list[ConfigEntry] = []
        refusal = config_resource_refusal(ctx, AclOperation.DESCRIBE_CONFIGS, resource.resource_type,
                                          resource.resource_name)
        try:
            if refusal is not None:
                raise ControllerError(refusal, ERROR_MESSAGES[refusal])
            entries = _entries(ctx, resource)
        except ControllerError as exc:
            code, message = exc.code, exc.message
        results.append(
            ctx.make(
                "DescribeConfigsResult",
                error_code=code,
                error_message=message,
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
                configs=[_result_entry(ctx, e, synonyms, documentation) for e in entries],
            )
        )
    return ctx.make("DescribeConfigsResponse", throttle_time=0, results=results)
