"""AlterConfigs (33): replace a topic's (or a broker's dynamic) whole set of config overrides (the legacy API).

Keys not named in the request go back to their broker/default values, which is why clients moved
to IncrementalAlterConfigs; the semantics are kept because old tools still rely on them. The
controller commits config records and the replica manager pushes the new LogConfig to the live logs.
"""

from __future__ import annotations

from typing import Any

from bus.broker.apis._common import alter_config_resources
from bus.broker.context import RequestContext

API_KEY = 33
MIN_VERSION = 0
MAX_VERSION = 2


def handle(ctx: RequestContext, request: Any) -> Any:
    controller = ctx.controller

    def alter_topic(name: str, resource: Any) -> None:
        # A null value means "no override", the same as leaving the key out of the full set.
        changes = {config.name: config.value for config in resource.configs}
        controller.alter_topic_configs(name, changes, replace=True, validate_only=request.validate_only)

    def alter_broker(name: str, resource: Any) -> None:
        changes = {config.name: config.value for config in resource.configs}
        controller.alter_broker_configs(name, changes, replace=True, validate_only=request.validate_only)

    responses = alter_config_resources(ctx, request.resources, alter_topic, alter_broker)
    return ctx.make("AlterConfigsResponse", throttle_time=0, responses=responses)
