"""IncrementalAlterConfigs (44): SET, DELETE, APPEND or SUBTRACT individual topic or dynamic broker configs.

APPEND and SUBTRACT edit list configs (cleanup.policy) item by item, starting from the value in
effect (the override, else the broker's synonym, else the default), so "append compact" on a topic
that inherits "delete" yields "delete,compact" as a user reading DescribeConfigs would expect.
All operations on one resource are validated together and committed at once, or not at all.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.apis._common import alter_config_resources, dynamic_broker_value
from bus.broker.context import RequestContext
from bus.config.broker import BROKER_CONFIGS
from bus.config.definitions import ConfigDef, ConfigType
from bus.config.topic import TOPIC_CONFIGS, resolve_topic_config
from bus.controller.controller import ControllerError

API_KEY = 44
MIN_VERSION = 0
MAX_VERSION = 1


class Op(enum.IntEnum):
    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


def _split(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


def _edit_list(name: str, op: Op, value: str | None, keys: ConfigDef, current: Callable[[str], str],
               what: str) -> str:
    """The new value of list config `name` after appending or removing the items in `value`."""
    key = keys.keys.get(name)
    if key is None:
        raise ControllerError(ErrorCode.invalid_config, f"Unknown {what} config name: {name}")
    if key.type is not ConfigType.LIST:
        raise ControllerError(ErrorCode.invalid_config,
                              f"Can't {op.name} to key {name} because its type is not LIST.")
    if value is None:
        raise ControllerError(ErrorCode.invalid_config, f"Null value not supported for {op.name} of {name}")
    items = _split(current(name))
    for item in _split(value):
        if op is Op.APPEND and item not in items:
            items.append(item)
        elif op is Op.SUBTRACT and item in items:
            items.remove(item)
    return ",".join(items)


def _changes(resource: Any, keys: ConfigDef, current: Callable[[str], str], what: str) -> dict[str, str | None]:
    """The resource's operations as changes for the controller: key -> new value, None to delete. `current(name)`:
    the value in effect, which APPEND and SUBTRACT start from."""
    names = [config.name for config in resource.configs]
    if len(set(names)) != len(names):
        raise ControllerError(ErrorCode.invalid_request, "Error due to duplicate config keys")
    changes: dict[str, str | None] = {}
    for config in resource.configs:
        try:
            op = Op(config.config_operation)
        except ValueError:
            raise ControllerError(ErrorCode.invalid_request,
                                  f"Unknown config operation {config.config_operation} for {config.name}") from None
        if op is Op.SET:
            if config.value is None:
                raise ControllerError(ErrorCode.invalid_config,
                                      f"Null value not supported for {what} configs: {config.name}")
            changes[config.name] = config.value
        elif op is Op.DELETE:
            changes[config.name] = None
        else:
            changes[config.name] = _edit_list(config.name, op, config.value, keys, current, what)
    return changes


def handle(ctx: RequestContext, request: Any) -> Any:
    controller = ctx.controller
    broker_static = ctx.config.static_topic_defaults()

    def alter_topic(name: str, resource: Any) -> None:
        topic = controller.topic(name)
        changes = _changes(resource, TOPIC_CONFIGS,
                           lambda key: resolve_topic_config(key, topic.configs, broker_static).value, "topic")
        controller.alter_topic_configs(name, changes, replace=False, validate_only=request.validate_only)

    def alter_broker(name: str, resource: Any) -> None:
        dynamic = controller.working.broker_configs
        changes = _changes(resource, BROKER_CONFIGS,
                           lambda key: dynamic_broker_value(dynamic, ctx.config, name, key)[0] or "", "broker")
        controller.alter_broker_configs(name, changes, replace=False, validate_only=request.validate_only)

    responses = alter_config_resources(ctx, request.resources, alter_topic, alter_broker)
    return ctx.make("IncrementalAlterConfigsResponse", throttle_time=0, responses=responses)
